// lattn/attention.h — one MLA attention layer's forward over a mixed batch
// (seed 002's MLACommonImpl), on a paged latent KV cache.
//
//   forward(q, kv_c_normed, k_pe, cache, metadata) -> out [T, N*V]
//   1. concat_and_cache_mla: write every token's [kv_c | k_pe] to the cache
//   2. decode rows [0, num_decode_tokens): ql_nope = q_nope · W_UK_T,
//      DecodeBackend::run over the latent cache, then · W_UV
//   3. prefill rows [num_decode_tokens, T): up-project the new latents
//      (kv_b_proj) to k_nope, v; causal attention with LSE; per context
//      chunk: gather_cache -> up-project -> non-causal attention ->
//      merge_attn_states; then merge context with new tokens
//
// The attention owns only kv_b_proj (W_UK, W_UV) and their absorbed forms;
// the model owns W_DQ/W_UQ/W_QR/W_DKV/W_KR, RoPE and W_O (docs/mla.md).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "lattn/backend.h"
#include "lattn/cache.h"
#include "lattn/config.h"
#include "lattn/dcp.h"
#include "lattn/metadata.h"
#include "lattn/sparse.h"
#include "lattn/tensor.h"

namespace lattn {

struct MlaAttentionConfig {
  MlaDims dims;
  float scale = 0.f;                   // softmax scale; 0 = dims.softmax_scale() (the model's, docs/mla.md)
  DType dtype = DType::bf16;           // activation dtype (f16, bf16; f32 for CPU backends)
  DType kv_cache_dtype = DType::bf16;  // f16, bf16 or fp8_e4m3 (must match the caches passed to forward)
  Device device = Device::cpu();
  Stream stream = nullptr;
  std::string prefill_backend;           // "" = the selector's choice
  std::string decode_backend;            // "" = the selector's choice
  int block_size = 16;                   // for backend selection
  int max_query_tokens_per_request = 1;  // decode s_q the backends must support
  // Batch-invariant mode (docs/mla.md, "Batch invariance"): a request's
  // output bits do not depend on the rest of the batch. Also switched on by
  // the environment variable LATTN_BATCH_INVARIANT=1. Build the metadata
  // with MetadataBuilderConfig::batch_invariant too (per-request chunks).
  bool batch_invariant = false;
  // Seed 002: MLACommonImpl refuses KV sharing ("KV sharing not supported in V0.").
  std::optional<std::string> kv_sharing_target_layer_name;

  // Sparse attention (DeepSeek-V3.2's DSA, docs/sparse.md). index_topk > 0
  // makes this a sparse layer: every token, decode or prefill, attends in
  // the absorbed form over the index_topk cached positions its lightning
  // indexer scores highest (all of them when it sees fewer). Such a layer
  // takes the indexer's inputs in forward (IndexerInputs), runs no dense
  // backend, and allows kv_cache_dtype = kFp8DsMla (the 656-byte format).
  int index_topk = 0;           // 0 = dense MLA; DeepSeek-V3.2: 2048
  int index_n_heads = 64;       // H, indexer heads
  int index_head_dim = 128;     // D, indexer key and query width
  std::string sparse_backend;   // "" = the sparse selector's choice (lattn/sparse.h)
  std::string indexer_backend;  // "" = the device's own ("cpu" on the host, "cuda"); or "reference"

  // The caches this layer is configured for, as one value: {dims.kv_lora_rank,
  // dims.qk_rope_head_dim, kv_cache_dtype, block_size}; the fp8 scale is the
  // cache's own (LatentCache::scale). set_kv_cache_spec sets those four
  // fields from one (docs/metadata.md, "One KvCacheSpec").
  KvCacheSpec kv_cache_spec() const { return {dims.kv_lora_rank, dims.qk_rope_head_dim, kv_cache_dtype, block_size}; }
  void set_kv_cache_spec(const KvCacheSpec& spec) {
    dims.kv_lora_rank = spec.kv_lora_rank;
    dims.qk_rope_head_dim = spec.qk_rope_head_dim;
    kv_cache_dtype = spec.dtype;
    block_size = spec.block_size;
  }
};

// The lightning indexer's inputs of one step, computed by the model (its
// wq_b, wk + norm + RoPE, and weights_proj), for the rows of q:
//   q        [T, H, D]  activation dtype or f32, on the layer's device
//   k        [T, D]     this step's new keys (written to `cache` at the metadata's slots)
//   weights  [T, H] f32 per-token head weights, softmax scale folded in
//   cache    the layer's indexer key cache (same blocks and block size as the latent cache)
struct IndexerInputs {
  Tensor q;
  Tensor k;
  Tensor weights;
  const IndexerKeyCache* cache = nullptr;
};

// Threads: one MlaAttention serves one call at a time. Its scratch memory,
// weights and stream belong to the layer, so a call that arrives from another
// thread while one runs (forward, process_weights_after_loading, set_stream)
// is refused with RuntimeError instead of silently sharing the scratch. Give
// each thread its own layer, or serialize the calls. Different layers may run
// at once, also on one cache when their slot mappings do not overlap. On
// CUDA the work is asynchronous: a layer's next call reuses its scratch, so
// calls on different streams must be ordered by the caller.
class MlaAttention {
 public:
  explicit MlaAttention(const MlaAttentionConfig& config);
  ~MlaAttention();
  MlaAttention(MlaAttention&&) noexcept;
  MlaAttention& operator=(MlaAttention&&) noexcept;

  const MlaAttentionConfig& config() const;

  // The CUDA stream later calls enqueue on (config.stream at construction):
  // engines that run each step on the current stream of their framework set
  // it before forward. Updates both backends. Ignored on the CPU.
  void set_stream(Stream stream);

  // Loads kv_b_proj's weight, (out, in) = [N*(P+V), L], any floating dtype,
  // on any device; splits it per head into W_UK_T [N, P, L] and W_UV [N, L, V]
  // (contiguous, activation dtype, on the layer's device). A wrong shape raises
  // AssertionError with the seed's text (docs/mla.md).
  void process_weights_after_loading(const Tensor& kv_b_proj_weight);
  const Tensor& W_UK_T() const;  // [N, P, L]
  const Tensor& W_UV() const;    // [N, L, V]
  // The owner of the memory W_UK_T() and W_UV() view now. Reloading the
  // weights allocates new storage; a caller that keeps views beyond a
  // reload holds this to keep the old memory valid (the Python bindings do).
  std::shared_ptr<const void> weights_owner() const;

  // One layer's forward (see the file comment). Shapes:
  //   q            [T, N, P+R] or [T, N*(P+R)]   activation dtype
  //   kv_c_normed  [T, L]                         activation dtype
  //   k_pe         [T, R] or [T, 1, R]            activation dtype (roped)
  //   cache        this layer's latent cache (dtype == config.kv_cache_dtype)
  //   metadata     the step's plan (built by MlaMetadataBuilder, on this device)
  //   out          [T, N*V] written in place when defined (rows may be
  //                strided); otherwise an internal buffer is used (valid
  //                until the next forward)
  //   output_scale undefined, or 1-element f32: out is fp8_e4m3 = fp8(o / scale);
  //                NotImplementedError("fused output quantization is not yet
  //                supported for MLAImplBase") unless both backend classes
  //                report supports_quant_output
  // Rows past num_decode_tokens + num_prefill_tokens (input padding) are set
  // to 0. Every argument and every metadata index is checked before anything
  // is written (ValueError naming the argument; the cache is unchanged).
  // Returns the output view [T, N*V]. docs/mla.md describes the algorithm.
  Tensor forward(const Tensor& q, const Tensor& kv_c_normed, const Tensor& k_pe, const LatentCache& cache,
                 const MlaMetadata& metadata, const Tensor& out = {}, const Tensor& output_scale = {});

  // Decode context parallelism (docs/dcp.md): this layer becomes rank
  // comm->rank() of a group of comm->world_size() ranks that each hold a
  // token-interleaved shard (`interleave` tokens per rank in turn) of every
  // request's latent cache. Decode then goes through the overload below:
  // each rank writes only its own new tokens, attends over its shard (causal
  // by global position, also for s_q > 1) and the ranks' partial results are
  // combined with the LSE correction through `comm` (`method`) before the V
  // up-projection. `comm` is the engine's (NCCL, or the in-process group),
  // on this layer's device; the layer does not own it and it must outlive
  // the layer's calls. nullptr switches DCP off. Every rank of the group
  // must call forward for every step, with the same query rows. Prefills
  // with cached context attend to every rank's share of it: each rank's
  // partial result over its share is combined the same way, then merged
  // with the new tokens' causal attention.
  void set_dcp(Communicator* comm, int interleave = 1,
               DcpCombineMethod method = DcpCombineMethod::all_gather_reduce_scatter);
  // world_size 1 when DCP is off.
  DcpConfig dcp_config() const;

  // One step under DCP. `plan` is this rank's plan from
  // build_dcp_decode_metadata or, for a batch with prefills,
  // build_dcp_metadata (same requests, the rank's local block tables,
  // built with this layer's dcp_config()); q, kv_c_normed and k_pe hold every
  // query token of the step (the same on every rank), in the plan's order.
  // out as in forward. ValueError when set_dcp was not called.
  Tensor forward(const Tensor& q, const Tensor& kv_c_normed, const Tensor& k_pe, const LatentCache& cache,
                 const DcpDecodePlan& plan, const Tensor& out = {}, const Tensor& output_scale = {});

  // The forward of a sparse layer (config.index_topk > 0): writes the
  // latents and the indexer keys, runs the indexer's top-k for every token
  // (causal, over its own request's positions), then sparse absorbed
  // attention over those slots and the W_UV up-projection. Same shapes and
  // checks as forward; fused fp8 output is not supported. A dense layer
  // refuses it, and a sparse layer refuses the plain forward (ValueError).
  Tensor forward(const Tensor& q, const Tensor& kv_c_normed, const Tensor& k_pe, const LatentCache& cache,
                 const MlaMetadata& metadata, const IndexerInputs& indexer, const Tensor& out = {});

  // Bytes of scratch memory this layer holds (on its device). Scratch buffers
  // only grow, to the largest step seen: after warm-up every step reuses
  // the same memory. The context part is bounded by the metadata's
  // context_chunk_workspace_size, whatever the context length.
  size_t workspace_bytes() const;

  // The backends this layer runs, and why they were chosen. A sparse layer
  // has no dense backend (ValueError) but a sparse one; a dense layer's
  // sparse_backend() is nullptr.
  const PrefillBackend& prefill_backend() const;
  const DecodeBackend& decode_backend() const;
  const SparseMlaBackendClass* sparse_backend() const;

  // What runs for this layer's prefill / decode rows, in words
  // (lattn/kernel_label.h): the dense backend instance's kernel_label() (a
  // CUDA decode instance names the kernel its latest plan chose), or, on a
  // sparse layer, the sparse backend's name (it runs both kinds of rows).
  // Engines report these after a step instead of asking which kind of layer
  // this is.
  std::string prefill_kernel_label() const;
  std::string decode_kernel_label() const;

  struct Impl;  // opaque: the layer's state (src/core/attention/attention_impl.h)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lattn
