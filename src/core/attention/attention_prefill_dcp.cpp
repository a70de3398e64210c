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
#include <algorithm>
#include <utility>

#include "core/attention/attention_impl.h"
#include "core/dcp/dcp_kernels.h"
#include "core/ops/forward_ops.h"

namespace lattn::detail {

namespace {

// This rank's share of the context, every local chunk merged into
// mine_out [Tp, N, V] f32 with its LSE; returns the LSE tensor that holds
// the result (the loop swaps two buffers).
Tensor attend_local_context(MlaAttention::Impl& impl, const LatentCache& cache, const PrefillMetadata& pm,
                            int64_t workspace_rows, const Tensor& q, int64_t v_width, const Tensor& mine_out,
                            Tensor mine_lse, Tensor next_lse) {
  const MlaDims& d = impl.dims();
  const int64_t Tp = pm.num_prefill_tokens, N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim,
                R = d.qk_rope_head_dim, V = d.v_head_dim;
  const DType dtype = impl.config.dtype;
  Workspace& ws = impl.workspace;
  const Stream stream = impl.run_context().stream;

  // Nothing seen yet: LSE -inf, so the first merge never reads mine_out.
  dcp_kernels(impl.config.device).fill_neg_inf(mine_lse, stream);
  const int num_chunks = pm.chunks.num_chunks;
  if (num_chunks == 0) return mine_lse;
  const Tensor latent_all = ws.get(WorkspaceSlot::context_latent, {workspace_rows, L + R}, dtype);
  const Tensor k_all = ws.get(WorkspaceSlot::context_k, {workspace_rows, N, P + R}, dtype);
  const Tensor v_all = ws.get(WorkspaceSlot::context_v, {workspace_rows, N, v_width}, dtype);
  const Tensor chunk_out = ws.get(WorkspaceSlot::chunk_out, {Tp, N, v_width}, dtype);
  const Tensor chunk_lse = ws.get(WorkspaceSlot::chunk_lse, {N, Tp}, DType::f32);
  for (int i = 0; i < num_chunks; ++i) {
    attend_context_chunk(impl, cache, pm, i, q, latent_all, k_all, v_all, chunk_out, chunk_lse);
    // The output may alias the prefix (elementwise); the LSE may not, hence two LSE buffers.
    merge_attn_states_unchecked(mine_out, next_lse, mine_out, mine_lse, chunk_out.narrow(2, 0, V), chunk_lse, stream);
    std::swap(mine_lse, next_lse);
  }
  return mine_lse;
}

}  // namespace

bool forward_prefill_dcp(MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache,
                         const MlaMetadata& metadata, const Tensor& out_rows, const Tensor& staging_rows) {
  const MlaDims& d = impl.dims();
  const PrefillMetadata& pm = *metadata.prefill;
  const int64_t Td = metadata.num_decode_tokens, Tp = pm.num_prefill_tokens, N = d.num_heads, P = d.qk_nope_head_dim,
                R = d.qk_rope_head_dim, V = d.v_head_dim;
  const DType dtype = impl.config.dtype;
  Workspace& ws = impl.workspace;
  const Stream stream = impl.run_context().stream;
  PrefillBackend& backend = *impl.prefill;
  const int64_t v_width = backend.pads_v() ? P + R : V;

  // The new tokens among themselves (causal), on every rank.
  const Tensor q = args.q.narrow(0, Td, Tp);  // [Tp, N, P+R], strided
  const Tensor k = ws.get(WorkspaceSlot::new_k, {Tp, N, P + R}, dtype);
  const Tensor v = ws.get(WorkspaceSlot::new_v, {Tp, N, v_width}, dtype);
  up_project(impl, args.kv_c.narrow(0, Td, Tp), args.k_pe.narrow(0, Td, Tp), k, v);
  backend.prepare_metadata(pm);
  const Tensor new_out = ws.get(WorkspaceSlot::new_out, {Tp, N, v_width}, dtype);
  const Tensor new_lse = ws.get(WorkspaceSlot::new_lse, {N, Tp}, DType::f32);
  backend.run_prefill_new_tokens(q, k, v, true, new_out, new_lse);

  // This rank's share of the context (a rank with none still joins the combine).
  int64_t workspace_rows = std::max<int64_t>(metadata.context_chunk_workspace_size, 1);
  for (int32_t rows : pm.chunks.seq_tot) workspace_rows = std::max<int64_t>(workspace_rows, rows);
  const Tensor ctx_out = ws.get(WorkspaceSlot::context_out, {Tp, N, V}, DType::f32);
  const Tensor lse_a = ws.get(WorkspaceSlot::context_lse, {N, Tp}, DType::f32);
  const Tensor lse_b = ws.get(WorkspaceSlot::context_lse_next, {N, Tp}, DType::f32);
  const Tensor ctx_lse = attend_local_context(impl, cache, pm, workspace_rows, q, v_width, ctx_out, lse_a, lse_b);

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
