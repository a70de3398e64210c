// Prefill rows of MlaAttention::forward under decode context parallelism
// (docs/dcp.md, "Prefill with cached context"). Each rank holds its
// interleaved share of every request's cached context; the new tokens (the
// same on every rank) attend to the whole context as:
//   new  = causal attention of the new tokens among themselves, with LSE
//          (computed on every rank: the new tokens' K and V are in hand)
//   mine = attention to this rank's share of the context, chunk by chunk
//          within the workspace bound, merged in f32 (LSE -inf where this
//          rank holds none of a request's context: never read)
//   ctx  = the ranks' `mine` combined with the LSE correction (dcp_combine:
//          all-gather of the LSEs, rescale, reduce-scatter / all-gather, or
//          one all-to-all), every head on every rank
//   out  = merge(ctx, new), rounded once to the activation dtype
// Only the f32 partial of the context ([Tp, N, V] plus its LSE) crosses the
// links, never the latent context itself.
#include <utility>

#include "core/attention/attention_impl.h"
#include "core/dcp/dcp_kernels.h"
#include "core/ops/forward_ops.h"

namespace lattn::detail {

namespace {

// This rank's share of the context, every local chunk merged into
// mine_out [Tp, N, V] f32 with its LSE; returns the LSE tensor that holds
// the result (the loop swaps two buffers).
Tensor attend_local_context(MlaAttention::Impl& impl, const LatentCache& cache, const MlaMetadata& metadata,
                            const Tensor& q, int64_t v_width, const Tensor& mine_out, Tensor mine_lse,
                            Tensor next_lse) {
  const PrefillMetadata& pm = *metadata.prefill;
  const int64_t V = impl.dims().v_head_dim;
  const Stream stream = impl.run_context().stream;

  // Nothing seen yet: LSE -inf, so the first merge never reads mine_out.
  dcp_kernels(impl.config.device).fill_neg_inf(mine_lse, stream);
  const int num_chunks = pm.chunks.num_chunks;
  if (num_chunks == 0) return mine_lse;
  const ContextChunkScratch scratch = context_chunk_scratch(impl, metadata, v_width);
  for (int i = 0; i < num_chunks; ++i) {
    attend_context_chunk(impl, cache, pm, i, q, scratch);
    // The output may alias the prefix (elementwise); the LSE may not, hence two LSE buffers.
    merge_attn_states_unchecked(mine_out, next_lse, mine_out, mine_lse, scratch.chunk_out.narrow(2, 0, V),
                                scratch.chunk_lse, stream);
    std::swap(mine_lse, next_lse);
  }
  return mine_lse;
}

}  // namespace

bool forward_prefill_dcp(MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache,
                         const MlaMetadata& metadata, const Tensor& out_rows, const Tensor& staging_rows) {
  const int64_t Tp = metadata.prefill->num_prefill_tokens, N = impl.dims().num_heads, V = impl.dims().v_head_dim;
  Workspace& ws = impl.workspace;
  const Stream stream = impl.run_context().stream;

  // The new tokens among themselves (causal), on every rank.
  const PrefillNewTokens t = prefill_new_tokens(impl, args, metadata);
  const Tensor new_out = ws.get(WorkspaceSlot::new_out, {Tp, N, t.v_width}, impl.config.dtype);
  const Tensor new_lse = ws.get(WorkspaceSlot::new_lse, {N, Tp}, DType::f32);
  impl.prefill->run_prefill_new_tokens(t.q, t.k, t.v, true, new_out, new_lse);

  // This rank's share of the context (a rank with none still joins the combine).
  const Tensor ctx_out = ws.get(WorkspaceSlot::context_out, {Tp, N, V}, DType::f32);
  const Tensor lse_a = ws.get(WorkspaceSlot::context_lse, {N, Tp}, DType::f32);
  const Tensor lse_b = ws.get(WorkspaceSlot::context_lse_next, {N, Tp}, DType::f32);
  const Tensor ctx_lse = attend_local_context(impl, cache, metadata, t.q, t.v_width, ctx_out, lse_a, lse_b);

  // Every rank's share combined, in place (dcp_combine reads its partials before writing).
  dcp_combine_rows(*impl.dcp_comm, Tensor(), {}, ctx_out, ctx_lse, ctx_out, ctx_lse, impl.dcp_method, stream,
                   impl.dcp_scratch.get());

  // (context ⊕ new): prefix = context, suffix = new tokens, as the single-rank path merges them.
  const bool staged = args.quantize;
  const Tensor target = heads_view(staged ? staging_rows : out_rows, N, V);  // [Tp, N, V] activation dtype
  merge_attn_states_unchecked(target, Tensor(), ctx_out, ctx_lse, new_out.narrow(2, 0, V), new_lse, stream);
  return staged;
}

}  // namespace lattn::detail
