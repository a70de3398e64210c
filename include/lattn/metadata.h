// lattn/metadata.h — the per-step "plan": attention metadata for a mixed
// batch of decodes and prefills, the context-chunk plan, and the builder that
// makes both from a batch description.
//
// Row order everywhere is vLLM v1's: DECODES FIRST, THEN PREFILLS. Request
// rows [0, num_decodes) are decodes (query_len <= reorder_batch_threshold),
// rows [num_decodes, num_reqs) prefills; token rows [0, num_decode_tokens)
// belong to decodes, [num_decode_tokens, num_decode_tokens +
// num_prefill_tokens) to prefills.
//
// Index arrays are Tensor views into storage owned by the metadata object:
//   X_cpu  — host copy (always present)
//   X      — the copy on the metadata's device (== X_cpu when device is cpu),
//            filled by MlaMetadata::to_device (plan time, not run time).
// Copies of an MlaMetadata share storage, so views stay valid as long as one
// copy lives. All index arrays are int32 except slot_mapping (int64), as in
// the seeds' uploads (docs/metadata.md).
//
// Terms (seed 002): context_len = tokens already computed and cached
// (num_computed_tokens), query_len = new tokens this step,
// seq_len = context_len + query_len.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lattn/batch_reorder.h"
#include "lattn/common_metadata.h"
#include "lattn/device.h"
#include "lattn/kv_cache_spec.h"
#include "lattn/step_plans.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn {

// Slot id of a padded token: cache writers skip it.
inline constexpr int64_t PAD_SLOT_ID = -1;

// Context-chunk plan of the prefill rows (seed 002, MLACommonMetadataBuilder.build;
// docs/metadata.md). Chunk i gathers, for prefill p, context tokens
// [starts[i][p], starts[i][p] + (cu_seq_lens[i][p+1] - cu_seq_lens[i][p])) into
// workspace rows [cu_seq_lens[i][p], cu_seq_lens[i][p+1]).
//
// A chunk may be empty for some prefills (context shorter than the chunk
// start, or no context at all) and even for all of them (seq_tot[i] == 0:
// num_chunks follows the longest context of the WHOLE batch, decodes
// included, exactly as the seed). Consumers must treat such chunks as zero
// keys (output 0, LSE -inf) and merge robustly.
struct ContextChunkPlan {
  int num_chunks = 0;                   // 0 when no prefill has context
  int64_t max_context_chunk = 0;        // tokens per prefill per chunk (multiple of block_size)
  int num_prefills_with_context = 0;    // prefills with context_len > 0 (the workspace's divisor)
  int64_t workspace_size = 0;           // rows of the gather workspace this plan was made for
  Tensor starts_cpu, starts;            // [num_chunks, num_prefills] int32: i * max_context_chunk
  Tensor cu_seq_lens_cpu, cu_seq_lens;  // [num_chunks, num_prefills + 1] int32, row i starts at 0
  std::vector<int32_t> max_seq_lens;    // [num_chunks] longest per-request chunk (tokens)
  std::vector<int32_t> seq_tot;         // [num_chunks] tokens gathered (<= workspace_size)

  // Row i of starts / cu_seq_lens on the metadata's device (gather_cache's
  // seq_starts / cu_seq_lens arguments), and on the host.
  Tensor chunk_starts(int i) const { return starts.select(0, i); }
  Tensor chunk_cu_seq_lens(int i) const { return cu_seq_lens.select(0, i); }
  Tensor chunk_starts_cpu(int i) const { return starts_cpu.select(0, i); }
  Tensor chunk_cu_seq_lens_cpu(int i) const { return cu_seq_lens_cpu.select(0, i); }
};

// Decode view (seed: decode_metadata): request rows [0, num_decodes) and
// token rows [0, num_decode_tokens). With decodes first, every array starts
// at row 0, so query_start_loc needs no rebasing and seq_start_loc starts at 0.
// Under CUDA-graph padding the padded requests are decodes too (seq_len 1,
// block-table row of zeros, slot PAD_SLOT_ID).
struct DecodeMetadata {
  int num_decodes = 0;                          // requests (padded ones included)
  int num_decode_tokens = 0;                    // tokens (padded ones included)
  int max_decode_query_len = 1;                 // s_q (> 1 for speculative / MTP decodes)
  int max_decode_seq_len = 0;                   // longest seq_len among decodes (tokens)
  int block_size = 0;                           // tokens per cache block
  bool use_cuda_graph = false;                  // built into pointer-stable CUDA-graph buffers
  Tensor query_start_loc_cpu, query_start_loc;  // [num_decodes + 1] int32, [0] == 0
  Tensor seq_lens_cpu, seq_lens;                // [num_decodes] int32 (context + new)
  Tensor seq_start_loc_cpu, seq_start_loc;      // [num_decodes + 1] int32, [0] == 0
  Tensor block_table_cpu, block_table;          // [num_decodes, max_blocks] int32
  Tensor slot_mapping_cpu, slot_mapping;        // [num_decode_tokens] int64 (PAD_SLOT_ID for padding)
  // This step's decode plans, made once and shared by every layer (lattn/step_plans.h).
  std::shared_ptr<StepPlans> plans = std::make_shared<StepPlans>();
};

// Prefill view (seed: prefill_metadata): request rows [num_decodes, num_reqs)
// and token rows [num_decode_tokens, num_decode_tokens + num_prefill_tokens)
// of the parent, with query_start_loc REBASED to start at 0 (the seed's
// decode-view rule applied to the rows that follow the others, docs/metadata.md).
struct PrefillMetadata {
  int num_prefills = 0;
  int num_prefill_tokens = 0;
  int max_query_len = 0;                        // longest prefill query (tokens)
  int max_prefill_seq_len = 0;                  // longest prefill seq_len (tokens)
  int block_size = 0;                           // tokens per cache block
  Tensor query_start_loc_cpu, query_start_loc;  // [num_prefills + 1] int32, rebased: [0] == 0
  Tensor seq_lens_cpu, seq_lens;                // [num_prefills] int32
  Tensor context_lens_cpu, context_lens;        // [num_prefills] int32
  // [num_prefills + 1] int32, NOT rebased (the parent's seq_start_loc[num_decodes:]),
  // as the seed leaves seq_start_loc of the sliced view: [0] == sum of decode seq_lens.
  Tensor seq_start_loc_cpu, seq_start_loc;
  Tensor block_table_cpu, block_table;    // [num_prefills, max_blocks] int32
  Tensor slot_mapping_cpu, slot_mapping;  // [num_prefill_tokens] int64
  ContextChunkPlan chunks;
  bool has_context() const { return chunks.num_chunks > 0; }
};

namespace detail {
struct MetadataStorage;  // owns the arrays behind every Tensor view (src/core/metadata/metadata_storage.h)
}

// Attention metadata of one step (seed 002's MLACommonMetadata, v1 order).
struct MlaMetadata {
  int num_reqs = 0;           // requests, CUDA-graph padding included
  int num_actual_tokens = 0;  // real tokens; slot_mapping may be longer (padding)
  int num_decodes = 0;
  int num_prefills = 0;
  int num_decode_tokens = 0;  // padded tokens included (seed: batch_size - num_prefill_tokens)
  int num_prefill_tokens = 0;
  int num_pad_reqs = 0;          // CUDA-graph padding: rows [num_reqs - num_pad_reqs, num_reqs)
  int max_query_len = 0;         // longest query of the batch (tokens)
  int max_decode_query_len = 1;  // longest decode query; 1 when there is no decode (seed default)
  int max_prefill_seq_len = 0;   // 0 when there is no prefill
  int max_decode_seq_len = 0;    // 0 when there is no decode
  int block_size = 0;
  bool use_cuda_graph = false;               // views live in the builder's pointer-stable graph buffers
  bool is_profile_run = false;               // slots are all PAD_SLOT_ID (memory-profiling run)
  int64_t context_chunk_workspace_size = 0;  // rows of the gather workspace (0: no chunking)
  Device device = Device::cpu();

  Tensor query_start_loc_cpu, query_start_loc;  // [num_reqs + 1] int32
  Tensor seq_start_loc_cpu, seq_start_loc;      // [num_reqs + 1] int32 (cumulative seq_lens)
  Tensor seq_lens_cpu, seq_lens;                // [num_reqs] int32
  Tensor context_lens_cpu, context_lens;        // [num_reqs] int32 (num_computed_tokens)
  Tensor block_table_cpu, block_table;          // [num_reqs, max_blocks] int32, rows right-padded with 0
  Tensor slot_mapping_cpu, slot_mapping;        // [>= num_actual_tokens] int64, PAD_SLOT_ID past the end

  std::optional<DecodeMetadata> decode;    // absent when num_decodes == 0
  std::optional<PrefillMetadata> prefill;  // absent when num_prefills == 0

  // The seeds' properties: nullptr when that part is empty.
  const DecodeMetadata* decode_metadata() const { return decode ? &*decode : nullptr; }
  const PrefillMetadata* prefill_metadata() const { return prefill ? &*prefill : nullptr; }

  // Copies every index array to `device` (asynchronously on `stream` for CUDA;
  // the host side may be rewritten as soon as this returns) and points the
  // device views at the copies. On the CPU the device views alias the host
  // views. Calling it again re-uploads (the host arrays may have been updated,
  // e.g. by advance_step or a CUDA-graph build) into the same device memory,
  // so device pointers stay stable. Moving to a different device than a
  // previous call throws ValueError.
  void to_device(Device device, Stream stream = nullptr);

  std::shared_ptr<detail::MetadataStorage> storage;
};

// ---------------------------------------------------------------------------
// Builder.

// One request of the batch, in batch order (decodes first).
struct RequestSpec {
  int32_t query_len = 0;            // new tokens this step (> 0)
  int32_t num_computed_tokens = 0;  // context_len: tokens already in the cache (>= 0)
  // Physical block ids of the request's pages: token position t lives in
  // block block_table[t / block_size] at offset t % block_size. Must cover
  // seq_len = num_computed_tokens + query_len, i.e. have at least
  // cdiv(seq_len, block_size) entries (may be longer; may be empty in a
  // profile run).
  std::vector<int32_t> block_table;
};

// Fixed capacities of the CUDA-graph buffers (seed: MLACommonState's graph
// buffers and the runner's graph_block_tables).
struct CudaGraphConfig {
  int max_batch_size = 0;          // largest captured batch (requests; = tokens, since s_q == 1)
  int max_seq_len_to_capture = 0;  // longest seq_len a captured graph serves (tokens)
  // Block-table width of every graph build: cdiv(max_seq_len_to_capture, block_size)
  // when 0.
  int max_blocks_per_seq = 0;
  // Captured batch sizes, ascending, each in [1, max_batch_size]; empty means
  // {1, 2, 4, 8, 16, 24, 32, ..., max_batch_size} (vLLM's default list: powers
  // of two up to 8, then steps of 8, capped at max_batch_size, which is always
  // included).
  std::vector<int> capture_sizes;
};

struct MetadataBuilderConfig {
  int block_size = 16;                  // tokens per cache block (the seed's page_size), > 0
  bool chunked_prefill_enabled = true;  // seed: scheduler_config.chunked_prefill_enabled
  bool enable_prefix_caching = false;   // seed: cache_config.enable_prefix_caching
  // Rows of the context gather workspace ([workspace, kv_lora_rank + rope_dim]);
  // required (> 0) when chunked prefill or prefix caching is enabled; size it
  // with mla_context_chunk_workspace_size().
  int64_t context_chunk_workspace_size = 0;
  // A request with query_len <= this is a decode (1 by default; backends that
  // decode several query tokens per request (speculative / MTP) raise it).
  int reorder_batch_threshold = 1;
  // Sliding window (tokens) of the model: prefill tokens that fall out of the
  // window get PAD_SLOT_ID slots (docs/metadata.md, compute_slot_mapping). nullopt: none.
  std::optional<int> sliding_window;
  // Cache size in blocks; when > 0, block ids used by a request must be below
  // it (slot ids beyond the cache are refused). <= 0: not checked (ids must
  // still be >= 0).
  int64_t num_cache_blocks = 0;
  // The model's head size (kv_lora_rank + rope dim); when set it must be one
  // of MLA's supported head sizes ({576}, docs/metadata.md).
  std::optional<int> head_dim;
  // Enables CUDA-graph builds (build_for_cudagraph / padded builds).
  std::optional<CudaGraphConfig> cudagraph;
  // Batch-invariant context chunks (docs/mla.md, "Batch invariance"): each
  // prefill's context is cut at multiples of batch_invariant_context_chunk
  // tokens (0: an eighth of the workspace; rounded down to block_size),
  // whatever the rest of the batch is, instead of the seed's equal share of
  // the workspace. Also switched on by LATTN_BATCH_INVARIANT=1.
  bool batch_invariant = false;
  int64_t batch_invariant_context_chunk = 0;

  // Sets block_size from the one value an engine holds per cache
  // (docs/metadata.md, "One KvCacheSpec"). The builder needs nothing else of
  // it; head_dim stays the opt-in check of vLLM's supported head sizes, which
  // a non-DeepSeek spec would fail.
  void set_kv_cache_spec(const KvCacheSpec& spec) { block_size = spec.block_size; }
};

// Per-build options.
struct BuildOptions {
  // CUDA-graph padding (seed: cuda_graph_pad_size / batch_size): pad the
  // decode-only batch to this many requests (one token each) inside the
  // builder's pointer-stable graph buffers. nullopt: a normal build.
  std::optional<int> cudagraph_batch_size;
  // Memory-profiling run: block tables may be empty and every slot is
  // PAD_SLOT_ID (seed: is_block_tables_empty / compute_slot_mapping).
  bool is_profile_run = false;
};

// The seeds' workspace sizing (MLACommonState.__init__, docs/metadata.md):
//   min(max(8 * max_model_len, 4 * max_num_seqs * block_size), 128 * 1024)
// Throws AssertionError when the result is below max_num_seqs * block_size
// (one page per request), and ValueError for non-positive arguments.
int64_t mla_context_chunk_workspace_size(int64_t max_model_len, int64_t max_num_seqs, int64_t block_size);

// Head sizes the MLA metadata accepts (seed: MLACommonBackend.get_supported_head_sizes()).
std::vector<int> mla_supported_head_sizes();

namespace detail {
struct GraphBuffers;  // the builder's persistent CUDA-graph storage
}

// Builds MlaMetadata from a batch description (seed: MLACommonMetadataBuilder,
// with v1 decodes-first order). Thread-safe for normal builds (const, no
// shared state); CUDA-graph builds write the builder's persistent buffers and
// must not run concurrently.
class MlaMetadataBuilder {
 public:
  // MLA can replay decode-only batches from a full CUDA graph.
  static constexpr bool full_cudagraph_supported = true;

  // Validates the configuration (ValueError naming the field).
  explicit MlaMetadataBuilder(MetadataBuilderConfig config);

  const MetadataBuilderConfig& config() const { return config_; }

  // Validates the batch (every refusal names the request index and values;
  // nothing is built on error) and builds the metadata on the host (device
  // views alias the host ones until to_device). Errors:
  //   AssertionError "query_lens: [..]"  no request has a positive query length (seed text)
  //   ValueError     a request with query_len <= 0, num_computed_tokens < 0, a block
  //                  table shorter than cdiv(seq_len, block_size), a block id < 0 or
  //                  >= num_cache_blocks, an empty batch, a token count beyond int32
  //   AssertionError the batch is not reordered (a decode after a prefill)
  //   AssertionError "max_context_chunk > 0 ..." the workspace cannot give every
  //                  prefill with context one page
  //   ValueError     a prefill with context while neither chunked prefill nor prefix
  //                  caching is enabled
  MlaMetadata build(std::span<const RequestSpec> requests, const BuildOptions& options = {}) const;

  // The v1 entry point (seed: build(common_prefix_len, common_attn_metadata,
  // fast_build)). Reads query_start_loc_cpu, seq_lens_cpu,
  // num_computed_tokens_cpu, block_table_tensor and slot_mapping (copied as
  // given, PAD entries included; device tensors are first copied to the host,
  // synchronously). common_prefix_len and fast_build do not change the result.
  MlaMetadata build(const CommonAttentionMetadata& common, int common_prefix_len = 0, bool fast_build = false) const;
  // The same with build options (CUDA-graph padding, profile run). In a
  // CUDA-graph build only the first num_actual_tokens slots are taken from
  // common.slot_mapping; the rest up to the padded batch are PAD_SLOT_ID.
  MlaMetadata build(const CommonAttentionMetadata& common, const BuildOptions& options, int common_prefix_len = 0,
                    bool fast_build = false) const;

  // v1 hooks (docs/metadata.md).
  // MLA needs decodes first: reorders with this builder's
  // reorder_batch_threshold; true when the batch was modified.
  bool reorder_batch(InputBatch& input_batch) const;
  // Decode-only batches with one query token per request can be replayed.
  bool can_run_in_cudagraph(const CommonAttentionMetadata& common) const;
  // Capture-time build: a decode-only batch (num_reqs == num_actual_tokens),
  // max_query_len forced to 1, then build(common, 0). AssertionError otherwise.
  MlaMetadata build_for_cudagraph_capture(const CommonAttentionMetadata& common) const;
  // Cascade attention is never used by MLA (seed default).
  bool use_cascade_attention(int common_prefix_len, std::span<const int32_t> query_lens, int num_query_heads,
                             int num_kv_heads, bool use_alibi, bool use_sliding_window, int num_sms) const;

  // CUDA graphs: the smallest captured batch size >= num_reqs, or nullopt
  // when num_reqs exceeds the largest one (or graphs are not configured).
  std::optional<int> padded_batch_size(int num_reqs) const;
  // Decode-only build into the persistent graph buffers, padded to
  // padded_batch_size(requests.size()) (or `batch_size` when given). Device
  // pointers are the same for every such build after the first to_device.
  MlaMetadata build_for_cudagraph(std::span<const RequestSpec> requests, std::optional<int> batch_size = {}) const;

 private:
  MetadataBuilderConfig config_;
  std::shared_ptr<detail::GraphBuffers> graph_;
};

}  // namespace lattn
