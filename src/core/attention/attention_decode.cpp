// Decode rows of MlaAttention::forward: the data-movement-friendly path
// (seed 002, docs/mla.md). W_UK is absorbed into the query so attention
// runs as MQA directly over the latent cache, and W_UV is applied after:
//   ql_nope[t, n, :] = q_nope[t, n, :] · W_UK_T[n]        [Td, N, L]
//   o[t, n, :]       = DecodeBackend(ql_nope, q_pe, cache) [Td, N, L]
//   out[t, n*V:(n+1)*V] = o[t, n, :] · W_UV[n]             [Td, N*V]
// Under DCP (docs/dcp.md) the backend attends over this rank's shard and
// returns a partial o with its LSE; dcp_combine merges the ranks' partials
// into o (every head) before W_UV.
#include "core/attention/attention_impl.h"
#include "core/ops/gemm.h"

namespace lattn::detail {

void forward_decode(MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache,
                    const DecodeMetadata& metadata, const Tensor& out_rows, const DcpDecodePlan* dcp_plan) {
  const MlaDims& d = impl.dims();
  const int64_t Td = metadata.num_decode_tokens, N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim,
                R = d.qk_rope_head_dim, V = d.v_head_dim;
  const DType dtype = impl.config.dtype;
  const RunContext ctx = impl.run_context();
  const Tensor q = args.q.narrow(0, 0, Td);  // [Td, N, P+R], strided

  // Absorb: one GEMM per head, q_nope rows [Td, P] (row stride q.stride(0)) by W_UK_T[n] [P, L].
  const Tensor ql_nope = impl.workspace.get(WorkspaceSlot::decode_ql_nope, {Td, N, L}, dtype);
  GemmProblem absorb;
  absorb.m = Td, absorb.n = L, absorb.k = P, absorb.batch = N;
  absorb.a = q.data(), absorb.a_dtype = dtype, absorb.lda = q.stride(0), absorb.batch_stride_a = q.stride(1);
  absorb.b = impl.w_uk_t->data(), absorb.b_dtype = dtype, absorb.ldb = L, absorb.batch_stride_b = P * L;
  absorb.c = ql_nope.data(), absorb.c_dtype = dtype, absorb.ldc = N * L, absorb.batch_stride_c = L;
  gemm(absorb, ctx);

  const Tensor q_pe = q.narrow(2, P, R);  // [Td, N, R], strided view of q
  const Tensor latent_out = impl.workspace.get(WorkspaceSlot::decode_out, {Td, N, L}, dtype);
  impl.decode->prepare_metadata(metadata);
  if (dcp_plan) {
    const Tensor partial = impl.workspace.get(WorkspaceSlot::decode_partial, {Td, N, L}, dtype);
    const Tensor lse = impl.workspace.get(WorkspaceSlot::decode_lse, {N, Td}, DType::f32);
    impl.decode->run(ql_nope, q_pe, cache, metadata, partial, lse);
    dcp_combine(*impl.dcp_comm, *dcp_plan, partial, lse, latent_out, Tensor(), impl.dcp_method, ctx.stream,
                impl.dcp_scratch.get());
  } else {
    impl.decode->run(ql_nope, q_pe, cache, metadata, latent_out, Tensor());
  }

  // V up-projection (the seed's _v_up_proj): o [Td, L] per head by W_UV[n] [L, V] into out's head columns.
  GemmProblem v_up;
  v_up.m = Td, v_up.n = V, v_up.k = L, v_up.batch = N;
  v_up.a = latent_out.data(), v_up.a_dtype = dtype, v_up.lda = N * L, v_up.batch_stride_a = L;
  v_up.b = impl.w_uv->data(), v_up.b_dtype = dtype, v_up.ldb = V, v_up.batch_stride_b = L * V;
  v_up.c = out_rows.data(), v_up.c_dtype = out_rows.dtype(), v_up.ldc = out_rows.stride(0), v_up.batch_stride_c = V;
  gemm(v_up, ctx);
}

}  // namespace lattn::detail
