// src/core/attention/attention_impl.h — MlaAttention's state and the pieces of its
// forward, one file each (internal):
//   attention.cpp           construction, backends, forward() orchestration
//   attention_weights.cpp   process_weights_after_loading (W_UK_T, W_UV)
//   attention_validate.cpp  every argument and metadata check, before any write
//   attention_decode.cpp    decode rows: absorb W_UK_T, DecodeBackend, W_UV
//   attention_prefill.cpp   prefill rows: up-project, causal + chunked context, merge
//   attention_sparse.cpp    a sparse layer's rows: indexer top-k, sparse attention, W_UV
#pragma once

#include <atomic>
#include <memory>

#include "core/attention/workspace.h"
#include "lattn/attention.h"

namespace lattn {
namespace detail {
class UncheckedDecodeRun;
}  // namespace detail

struct MlaAttention::Impl {
  MlaAttentionConfig config;  // scale resolved (never 0)
  std::shared_ptr<const PrefillBackendClass> prefill_class;
  std::shared_ptr<const DecodeBackendClass> decode_class;
  std::unique_ptr<PrefillBackend> prefill;
  std::unique_ptr<DecodeBackend> decode;
  // `decode`'s entry without its own checks, when it has one
  // (core/backends/unchecked_decode_run.h); null: forward calls decode->run.
  detail::UncheckedDecodeRun* decode_unchecked = nullptr;
  // A sparse layer (config.index_topk > 0) has this instead of the two above.
  std::shared_ptr<const SparseMlaBackendClass> sparse_class;
  // Shared, so a view a caller took (W_UK_T() with weights_owner()) keeps
  // its memory when process_weights_after_loading replaces the weights.
  std::shared_ptr<const OwnedTensor> w_uk_t;  // [N, P, L] activation dtype, on config.device; null until loaded
  std::shared_ptr<const OwnedTensor> w_uv;    // [N, L, V]
  detail::Workspace workspace;
  // Set while a call uses the layer's state (scratch, weights, stream):
  // a second thread's call is refused rather than sharing the scratch.
  std::atomic<bool> in_use{false};
  // Decode context parallelism (set_dcp): the engine's communicator, or null.
  Communicator* dcp_comm = nullptr;
  int dcp_interleave = 1;
  DcpCombineMethod dcp_method = DcpCombineMethod::all_gather_reduce_scatter;
  std::unique_ptr<DcpCombineScratch> dcp_scratch;

  const MlaDims& dims() const { return config.dims; }
  RunContext run_context() const { return {config.device, config.stream, 0, config.batch_invariant}; }
  bool supports_quant_output() const;
  bool is_sparse() const { return config.index_topk > 0; }
};

namespace detail {

// The forward's inputs, checked and normalized to one layout.
struct ForwardArgs {
  int64_t num_tokens = 0;    // T (rows of q; >= metadata.num_actual_tokens)
  Tensor q;                  // [T, N, P+R]
  Tensor kv_c;               // [T, L]
  Tensor k_pe;               // [T, R]
  bool quantize = false;     // output_scale given: the output is fp8_e4m3
  bool write_cache = false;  // the cache has storage (vLLM skips the write for an empty cache)
};

// Checks every argument of MlaAttention::forward, and every index in the
// metadata that the forward and its backends will follow, against the
// metadata's host copies. Throws ValueError naming the first bad argument;
// nothing has been written at that point.
ForwardArgs validate_forward(const MlaAttention::Impl& impl, const Tensor& q, const Tensor& kv_c_normed,
                             const Tensor& k_pe, const LatentCache& cache, const MlaMetadata& metadata,
                             const Tensor& out, const Tensor& output_scale);

// Holds impl.in_use for a scope: RuntimeError naming `op` when another
// thread's call holds it (the thread-safety contract of lattn/attention.h).
class ExclusiveUse {
 public:
  ExclusiveUse(std::atomic<bool>& in_use, const char* op);
  ~ExclusiveUse() { in_use_.store(false, std::memory_order_release); }
  ExclusiveUse(const ExclusiveUse&) = delete;
  ExclusiveUse& operator=(const ExclusiveUse&) = delete;

 private:
  std::atomic<bool>& in_use_;
};

// Decode rows [0, num_decode_tokens) (absorbed path).
//   out_rows [Td, N*V] activation dtype (rows may be strided)
//   dcp_plan this rank's DCP plan (impl.dcp_comm set): the backend's partial
//            result and LSE are combined over the group before W_UV; or null
void forward_decode(MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache,
                    const DecodeMetadata& metadata, const Tensor& out_rows, const DcpDecodePlan* dcp_plan = nullptr);

// Prefill rows [num_decode_tokens, num_actual_tokens) (compute-friendly path).
//   out_rows [Tp, N*V]: activation dtype, or fp8_e4m3 with output_scale when
//            the new-token attention can write it directly (no context, no V
//            padding); otherwise staging_rows (activation dtype) receives the
//            result and the return value is true: the caller quantizes it.
bool forward_prefill(MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache,
                     const MlaMetadata& metadata, const Tensor& out_rows, const Tensor& output_scale,
                     const Tensor& staging_rows);

// Checks a sparse layer's indexer inputs against the checked forward
// arguments and the latent cache (ValueError naming the argument).
void validate_indexer_inputs(const MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache,
                             const IndexerInputs& indexer);

// Prefill rows under DCP when some prefill of the batch has cached context
// (metadata = the rank's plan, impl.dcp_comm set; docs/dcp.md): the new
// tokens attend causally among themselves and to this rank's share of the
// context, the ranks combine their context partials, and the two merge.
// out_rows / staging_rows and the return value as forward_prefill's (the
// result is always computed in the activation dtype first).
bool forward_prefill_dcp(MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache,
                         const MlaMetadata& metadata, const Tensor& out_rows, const Tensor& staging_rows);

// Every computed row [0, Tc) of a sparse layer (Tc = num_decode_tokens +
// num_prefill_tokens): indexer key write, top-k, absorbed sparse attention, W_UV.
//   out_rows [Tc, N*V] activation dtype (rows may be strided)
void forward_sparse(MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache,
                    const MlaMetadata& metadata, const IndexerInputs& indexer, const Tensor& out_rows);

// Up-projects latent rows to per-head keys and values (kv_b_proj):
//   kv_c [X, L] (rows may be strided)   k_pe [X, R] (rows may be strided)
//   k    [X, N, P+R] contiguous: k_nope from W_UK, k_pe broadcast over heads
//   v    [X, N, V'] contiguous: v from W_UV (columns [V, V') zeroed when padded)
void up_project(const MlaAttention::Impl& impl, const Tensor& kv_c, const Tensor& k_pe, const Tensor& k,
                const Tensor& v);

// The prefill rows' new tokens (the single-rank and the DCP prefill):
// their keys and values up-projected into the workspace, and the step's
// prefill view prepared on the backend.
//   q [Tp, N, P+R] (a strided view of args.q), k [Tp, N, P+R], v [Tp, N, v_width]
//   v_width = P+R when the backend pads V (PrefillBackend::pads_v), else V
struct PrefillNewTokens {
  Tensor q, k, v;
  int64_t v_width = 0;
};
PrefillNewTokens prefill_new_tokens(MlaAttention::Impl& impl, const ForwardArgs& args, const MlaMetadata& metadata);

// The context-chunk loop's scratch (the single-rank and the DCP loops):
//   latent_all [W, L+R], k_all [W, N, P+R], v_all [W, N, v_width]  W = the plan's
//       workspace rows (at least its largest chunk): pointer-stable across steps
//   chunk_out [Tp, N, v_width] activation dtype, chunk_lse [N, Tp] f32
struct ContextChunkScratch {
  Tensor latent_all, k_all, v_all, chunk_out, chunk_lse;
};
ContextChunkScratch context_chunk_scratch(MlaAttention::Impl& impl, const MlaMetadata& metadata, int64_t v_width);

// One context chunk of a prefill: gathers chunk i's latent rows from the
// cache into the scratch, up-projects them and runs the backend's
// non-causal pass of q over them into scratch.chunk_out / chunk_lse.
void attend_context_chunk(MlaAttention::Impl& impl, const LatentCache& cache, const PrefillMetadata& pm, int i,
                          const Tensor& q, const ContextChunkScratch& scratch);

// The two per-head GEMMs of the absorbed form (decode rows, sparse rows):
//   absorb_q_nope  q [T, N, P+R] (rows strided; its first P columns) · W_UK_T[n] [P, L]
//                  -> out [T, N, >= L] (its first L columns; row and head strides its own)
//   up_project_v   latent [T, H, L] contiguous · W_UV[first_head + h] [L, V]
//                  -> out_rows [T, H*V] (rows may be strided), in out_rows' dtype
//                  (H = N, or under DCP a rank's slice of the heads)
void absorb_q_nope(const MlaAttention::Impl& impl, const Tensor& q, const Tensor& out);
void up_project_v(const MlaAttention::Impl& impl, const Tensor& latent, const Tensor& out_rows, int64_t first_head = 0);

// Grows the context-chunk scratch (gathered latents, up-projected K and V)
// to `workspace_rows` rows, as the largest chunk of the plan would.
void reserve_context_workspace(MlaAttention::Impl& impl, int64_t workspace_rows);

// A [rows, N*V] view seen as [rows, N, V] (same memory).
Tensor heads_view(const Tensor& rows, int64_t num_heads, int64_t head_dim);

}  // namespace detail
}  // namespace lattn
