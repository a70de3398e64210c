// Prefill rows of MlaAttention::forward: the compute-friendly path with
// chunked context (seed 002, docs/mla.md).
//
//   k, v   = up-project the new tokens' latents (k = [k_nope | k_pe broadcast])
//   suffix = causal attention of the new tokens among themselves, with LSE
//   for each context chunk i (at most workspace rows of context at a time):
//     gather_cache -> up-project -> non-causal attention, with LSE
//     run = merge(run, chunk)     (f32; first chunk: run = merge(chunk, suffix))
//   out    = run, rounded once to the activation dtype (the last merge)
// The up-projected context of one chunk is the only memory that grows with
// the context, and the chunk plan bounds it by the workspace size.
#include <algorithm>
#include <utility>

#include "core/attention/attention_impl.h"
#include "core/ops/forward_ops.h"
#include "core/ops/gemm.h"
#include "lattn/ops.h"

namespace lattn::detail {

Tensor heads_view(const Tensor& rows, int64_t num_heads, int64_t head_dim) {
  const int64_t shape[] = {rows.size(0), num_heads, head_dim};
  const int64_t strides[] = {rows.stride(0), head_dim, 1};
  return Tensor(rows.data(), rows.dtype(), shape, strides, rows.device());
}

void up_project(const MlaAttention::Impl& impl, const Tensor& kv_c, const Tensor& k_pe, const Tensor& k,
                const Tensor& v) {
  const MlaDims& d = impl.dims();
  const int64_t X = kv_c.size(0), N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim, R = d.qk_rope_head_dim,
                V = d.v_head_dim, v_width = v.size(2);
  if (X == 0) return;
  const RunContext ctx = impl.run_context();
  // k_nope[x, n, :] = kv_c[x, :] · W_UK_T[n]^T: W_UK_T[n] is [P, L], i.e. B given as [N=P, K=L].
  GemmProblem k_nope;
  k_nope.m = X, k_nope.n = P, k_nope.k = L, k_nope.batch = N;
  k_nope.a = kv_c.data(), k_nope.a_dtype = kv_c.dtype(), k_nope.lda = kv_c.stride(0), k_nope.batch_stride_a = 0;
  k_nope.b = impl.w_uk_t->data(), k_nope.b_dtype = impl.config.dtype, k_nope.ldb = L, k_nope.batch_stride_b = P * L;
  k_nope.trans_b = true;
  k_nope.c = k.data(), k_nope.c_dtype = k.dtype(), k_nope.ldc = N * (P + R), k_nope.batch_stride_c = P + R;
  gemm(k_nope, ctx);
  broadcast_k_pe(k_pe, k, impl.config.stream);

  if (v_width > V) fill_bytes(v, 0);  // padded V: the pad columns must be exact zeros
  // v[x, n, :] = kv_c[x, :] · W_UV[n], W_UV[n] is [L, V].
  GemmProblem v_up;
  v_up.m = X, v_up.n = V, v_up.k = L, v_up.batch = N;
  v_up.a = kv_c.data(), v_up.a_dtype = kv_c.dtype(), v_up.lda = kv_c.stride(0), v_up.batch_stride_a = 0;
  v_up.b = impl.w_uv->data(), v_up.b_dtype = impl.config.dtype, v_up.ldb = V, v_up.batch_stride_b = L * V;
  v_up.c = v.data(), v_up.c_dtype = v.dtype(), v_up.ldc = N * v_width, v_up.batch_stride_c = v_width;
  gemm(v_up, ctx);
}

void reserve_context_workspace(MlaAttention::Impl& impl, int64_t workspace_rows) {
  const MlaDims& d = impl.dims();
  const int64_t N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim, R = d.qk_rope_head_dim;
  const int64_t v_width = impl.prefill->pads_v() ? P + R : d.v_head_dim;
  const DType dtype = impl.config.dtype;
  impl.workspace.get(WorkspaceSlot::context_latent, {workspace_rows, L + R}, dtype);
  impl.workspace.get(WorkspaceSlot::context_k, {workspace_rows, N, P + R}, dtype);
  impl.workspace.get(WorkspaceSlot::context_v, {workspace_rows, N, v_width}, dtype);
}

ContextChunkScratch context_chunk_scratch(MlaAttention::Impl& impl, const MlaMetadata& metadata, int64_t v_width) {
  const MlaDims& d = impl.dims();
  const PrefillMetadata& pm = *metadata.prefill;
  const int64_t Tp = pm.num_prefill_tokens, N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim,
                R = d.qk_rope_head_dim;
  const DType dtype = impl.config.dtype;
  Workspace& ws = impl.workspace;
  int64_t rows = std::max<int64_t>(metadata.context_chunk_workspace_size, 1);
  for (int32_t chunk_rows : pm.chunks.seq_tot) rows = std::max<int64_t>(rows, chunk_rows);
  ContextChunkScratch s;
  // Sized by the plan's workspace, not by this step's chunks: pointer-stable across steps.
  s.latent_all = ws.get(WorkspaceSlot::context_latent, {rows, L + R}, dtype);
  s.k_all = ws.get(WorkspaceSlot::context_k, {rows, N, P + R}, dtype);
  s.v_all = ws.get(WorkspaceSlot::context_v, {rows, N, v_width}, dtype);
  s.chunk_out = ws.get(WorkspaceSlot::chunk_out, {Tp, N, v_width}, dtype);
  s.chunk_lse = ws.get(WorkspaceSlot::chunk_lse, {N, Tp}, DType::f32);
  return s;
}

void attend_context_chunk(MlaAttention::Impl& impl, const LatentCache& cache, const PrefillMetadata& pm, int i,
                          const Tensor& q, const ContextChunkScratch& s) {
  const int64_t L = impl.dims().kv_lora_rank, R = impl.dims().qk_rope_head_dim;
  const int64_t rows = pm.chunks.seq_tot[size_t(i)];
  const Tensor latent = s.latent_all.narrow(0, 0, rows);
  gather_cache_unchecked(cache, latent, pm.block_table, pm.chunks.cu_seq_lens.select(0, i), pm.num_prefills,
                         pm.chunks.starts.select(0, i), impl.config.stream);
  const Tensor k = s.k_all.narrow(0, 0, rows), v = s.v_all.narrow(0, 0, rows);
  up_project(impl, latent.narrow(1, 0, L), latent.narrow(1, L, R), k, v);
  impl.prefill->run_prefill_context_chunk(i, q, k, v, s.chunk_out, s.chunk_lse);
}

PrefillNewTokens prefill_new_tokens(MlaAttention::Impl& impl, const ForwardArgs& args, const MlaMetadata& metadata) {
  const MlaDims& d = impl.dims();
  const PrefillMetadata& pm = *metadata.prefill;
  const int64_t Td = metadata.num_decode_tokens, Tp = pm.num_prefill_tokens, N = d.num_heads, P = d.qk_nope_head_dim,
                R = d.qk_rope_head_dim;
  const DType dtype = impl.config.dtype;
  PrefillNewTokens t;
  t.v_width = impl.prefill->pads_v() ? P + R : d.v_head_dim;
  t.q = args.q.narrow(0, Td, Tp);  // [Tp, N, P+R], strided
  t.k = impl.workspace.get(WorkspaceSlot::new_k, {Tp, N, P + R}, dtype);
  t.v = impl.workspace.get(WorkspaceSlot::new_v, {Tp, N, t.v_width}, dtype);
  up_project(impl, args.kv_c.narrow(0, Td, Tp), args.k_pe.narrow(0, Td, Tp), t.k, t.v);
  impl.prefill->prepare_metadata(pm);
  return t;
}

namespace {

// The new tokens' attention merged with their whole context, chunk by chunk,
// into target [Tp, N, V] (activation dtype). The running result and its LSE
// stay in f32 across the chunk loop and are rounded once, by the last merge,
// so the error does not grow with the number of chunks (docs/mla.md,
// "Precision"). Merge order per row: ((new ⊕ chunk 0) ⊕ chunk 1) ⊕ ...; a
// chunk in which a request has no keys has LSE -inf and merges as an exact
// identity, so a row's bits do not depend on how many chunks the batch needs.
void attend_context(MlaAttention::Impl& impl, const LatentCache& cache, const MlaMetadata& metadata, const Tensor& q,
                    int64_t v_width, const Tensor& new_out, const Tensor& new_lse, const Tensor& target) {
  const PrefillMetadata& pm = *metadata.prefill;
  const int64_t Tp = pm.num_prefill_tokens, N = impl.dims().num_heads, V = impl.dims().v_head_dim;
  Workspace& ws = impl.workspace;
  const Stream stream = impl.config.stream;
  const ContextChunkScratch scratch = context_chunk_scratch(impl, metadata, v_width);
  const int num_chunks = pm.chunks.num_chunks;
  Tensor run_out, run_lse, next_lse;  // f32 running state (only when there is more than one chunk)
  if (num_chunks > 1) {
    run_out = ws.get(WorkspaceSlot::context_out, {Tp, N, V}, DType::f32);
    run_lse = ws.get(WorkspaceSlot::context_lse, {N, Tp}, DType::f32);
    next_lse = ws.get(WorkspaceSlot::context_lse_next, {N, Tp}, DType::f32);
  }

  for (int i = 0; i < num_chunks; ++i) {
    attend_context_chunk(impl, cache, pm, i, q, scratch);
    const Tensor chunk = scratch.chunk_out.narrow(2, 0, V);
    const bool last = i == num_chunks - 1;
    if (i == 0) {
      // (new ⊕ chunk 0): prefix = context, suffix = new tokens, as the seed merges them.
      merge_attn_states_unchecked(last ? target : run_out, last ? Tensor() : run_lse, chunk, scratch.chunk_lse,
                                  new_out.narrow(2, 0, V), new_lse, stream);
      continue;
    }
    // The output may alias the prefix (elementwise); the LSE may not, hence two LSE buffers.
    merge_attn_states_unchecked(last ? target : run_out, last ? Tensor() : next_lse, run_out, run_lse, chunk,
                                scratch.chunk_lse, stream);
    std::swap(run_lse, next_lse);
  }
}

}  // namespace

bool forward_prefill(MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache,
                     const MlaMetadata& metadata, const Tensor& out_rows, const Tensor& output_scale,
                     const Tensor& staging_rows) {
  const PrefillMetadata& pm = *metadata.prefill;
  const int64_t Tp = pm.num_prefill_tokens, N = impl.dims().num_heads, V = impl.dims().v_head_dim;
  Workspace& ws = impl.workspace;
  PrefillBackend& backend = *impl.prefill;
  const PrefillNewTokens t = prefill_new_tokens(impl, args, metadata);
  const bool pad_v = backend.pads_v();

  const bool has_context = pm.chunks.num_chunks > 0;
  if (!has_context && !pad_v) {
    // Nothing to merge: the new-token attention writes the layer output
    // directly (quantized by the backend when output_scale is given).
    backend.run_prefill_new_tokens(t.q, t.k, t.v, false, heads_view(out_rows, N, V), Tensor(), output_scale);
    return false;
  }
  const bool staged = args.quantize;
  const Tensor target = heads_view(staged ? staging_rows : out_rows, N, V);  // [Tp, N, V] activation dtype
  const Tensor new_out = ws.get(WorkspaceSlot::new_out, {Tp, N, t.v_width}, impl.config.dtype);
  if (!has_context) {  // padded V only: drop the pad columns
    backend.run_prefill_new_tokens(t.q, t.k, t.v, false, new_out, Tensor());
    copy_leading_columns(new_out, target, impl.config.stream);
    return staged;
  }
  const Tensor new_lse = ws.get(WorkspaceSlot::new_lse, {N, Tp}, DType::f32);
  backend.run_prefill_new_tokens(t.q, t.k, t.v, true, new_out, new_lse);
  // Only the first V columns of (padded) outputs are merged.
  attend_context(impl, cache, metadata, t.q, t.v_width, new_out, new_lse, target);
  return staged;
}

}  // namespace lattn::detail
