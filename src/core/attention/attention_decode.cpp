// Decode rows of MlaAttention::forward: the data-movement-friendly path
// (seed 002, docs/mla.md). W_UK is absorbed into the query so attention
// runs as MQA directly over the latent cache, and W_UV is applied after:
//   ql_nope[t, n, :] = q_nope[t, n, :] · W_UK_T[n]        [Td, N, L]
//   o[t, n, :]       = DecodeBackend(ql_nope, q_pe, cache) [Td, N, L]
//   out[t, n*V:(n+1)*V] = o[t, n, :] · W_UV[n]             [Td, N*V]
// Under DCP (docs/dcp.md) the backend attends over this rank's shard and
// returns a partial o with its LSE; dcp_combine merges the ranks' partials:
// into this rank's head slice, up-projected and all-gathered, when the heads
// divide over the ranks; else into every head before W_UV.
#include "core/attention/attention_impl.h"
#include "core/backends/unchecked_decode_run.h"
#include "core/ops/device_ops.h"
#include "core/ops/gemm.h"

namespace lattn::detail {

namespace {

// The backend's attention over the step validate_forward checked: its
// unchecked entry where it has one (the public run() would check the same
// step again, every layer).
void run_decode_backend(MlaAttention::Impl& impl, const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache,
                        const DecodeMetadata& metadata, const Tensor& out, const Tensor& lse) {
  if (impl.decode_unchecked) {
    impl.decode_unchecked->run_unchecked(ql_nope, q_pe, cache, metadata, out, lse);
  } else {
    impl.decode->run(ql_nope, q_pe, cache, metadata, out, lse);
  }
}

// DCP with H divisible by the world size W (vLLM's layout): each rank
// combines only its head slice [h0, h0 + H/W), up-projects it with its
// slice of W_UV, and the ranks all-gather the up-projected slices (V values
// per head instead of the L latents: 4x less data for DeepSeek) into every
// rank's out_rows.
//   partial [Td, N, L], lse [N, Td]: this rank's shard result; out_rows [Td, N*V]
void forward_decode_dcp_slices(MlaAttention::Impl& impl, const DcpDecodePlan& plan, const Tensor& partial,
                               const Tensor& lse, const Tensor& out_rows) {
  const MlaDims& d = impl.dims();
  Communicator& comm = *impl.dcp_comm;
  const int64_t Td = partial.size(0), N = d.num_heads, L = d.kv_lora_rank, V = d.v_head_dim;
  const int64_t W = comm.world_size(), Hs = N / W, h0 = comm.rank() * Hs;
  const DType dtype = impl.config.dtype, out_dtype = out_rows.dtype();
  const RunContext ctx = impl.run_context();

  const Tensor slice = impl.workspace.get(WorkspaceSlot::decode_out, {Td, Hs, L}, dtype);
  dcp_combine(comm, plan, partial, lse, slice, Tensor(), impl.dcp_method, ctx.stream, impl.dcp_scratch.get());

  const Tensor mine = impl.workspace.get(WorkspaceSlot::decode_v_slice, {Td, Hs * V}, out_dtype);
  up_project_v(impl, slice, mine, h0);

  // [W, Td, Hs*V]: rank r's block goes to out_rows' columns [r*Hs*V, (r+1)*Hs*V).
  const Tensor all = impl.workspace.get(WorkspaceSlot::decode_v_gathered, {W, Td, Hs * V}, out_dtype);
  comm.all_gather(mine, all, ctx.stream);
  const size_t es = size_t(dtype_size(out_dtype)), block = size_t(Hs * V) * es;
  for (int64_t r = 0; r < W; ++r) {
    device_ops(out_rows.device())
        .memcpy_2d(static_cast<char*>(out_rows.data()) + size_t(r) * block, size_t(out_rows.stride(0)) * es,
                   static_cast<const char*>(all.data()) + size_t(r * Td) * block, block, block, size_t(Td),
                   out_rows.device().index, ctx.stream);
  }
}

}  // namespace

void forward_decode(MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache,
                    const DecodeMetadata& metadata, const Tensor& out_rows, const DcpDecodePlan* dcp_plan) {
  const MlaDims& d = impl.dims();
  const int64_t Td = metadata.num_decode_tokens, N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim,
                R = d.qk_rope_head_dim;
  const DType dtype = impl.config.dtype;
  const RunContext ctx = impl.run_context();
  const Tensor q = args.q.narrow(0, 0, Td);  // [Td, N, P+R], strided

  // Absorb: one GEMM per head, q_nope rows [Td, P] (row stride q.stride(0)) by W_UK_T[n] [P, L].
  const Tensor ql_nope = impl.workspace.get(WorkspaceSlot::decode_ql_nope, {Td, N, L}, dtype);
  absorb_q_nope(impl, q, ql_nope);

  const Tensor q_pe = q.narrow(2, P, R);  // [Td, N, R], strided view of q
  const Tensor latent_out = impl.workspace.get(WorkspaceSlot::decode_out, {Td, N, L}, dtype);
  impl.decode->prepare_metadata(metadata);
  if (dcp_plan) {
    const Tensor partial = impl.workspace.get(WorkspaceSlot::decode_partial, {Td, N, L}, dtype);
    const Tensor lse = impl.workspace.get(WorkspaceSlot::decode_lse, {N, Td}, DType::f32);
    run_decode_backend(impl, ql_nope, q_pe, cache, metadata, partial, lse);
    Communicator& comm = *impl.dcp_comm;
    const int64_t W = comm.world_size();
    if (W > 1 && N % W == 0) {
      forward_decode_dcp_slices(impl, *dcp_plan, partial, lse, out_rows);
      return;
    }
    // Heads that do not divide over the ranks: every rank combines every head.
    dcp_combine(comm, *dcp_plan, partial, lse, latent_out, Tensor(), impl.dcp_method, ctx.stream,
                impl.dcp_scratch.get());
  } else {
    run_decode_backend(impl, ql_nope, q_pe, cache, metadata, latent_out, Tensor());
  }

  // V up-projection (the seed's _v_up_proj): o [Td, L] per head by W_UV[n] [L, V] into out's head columns.
  up_project_v(impl, latent_out, out_rows);
}

void absorb_q_nope(const MlaAttention::Impl& impl, const Tensor& q, const Tensor& out) {
  const MlaDims& d = impl.dims();
  const int64_t N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim;
  const DType dtype = impl.config.dtype;
  GemmProblem absorb;
  absorb.m = q.size(0), absorb.n = L, absorb.k = P, absorb.batch = N;
  absorb.a = q.data(), absorb.a_dtype = dtype, absorb.lda = q.stride(0), absorb.batch_stride_a = q.stride(1);
  absorb.b = impl.w_uk_t->data(), absorb.b_dtype = dtype, absorb.ldb = L, absorb.batch_stride_b = P * L;
  absorb.c = out.data(), absorb.c_dtype = dtype, absorb.ldc = out.stride(0), absorb.batch_stride_c = out.stride(1);
  gemm(absorb, impl.run_context());
}

void up_project_v(const MlaAttention::Impl& impl, const Tensor& latent, const Tensor& out_rows, int64_t first_head) {
  const MlaDims& d = impl.dims();
  const int64_t H = latent.size(1), L = d.kv_lora_rank, V = d.v_head_dim;
  const DType dtype = impl.config.dtype;
  GemmProblem v_up;
  v_up.m = latent.size(0), v_up.n = V, v_up.k = L, v_up.batch = H;
  v_up.a = latent.data(), v_up.a_dtype = dtype, v_up.lda = H * L, v_up.batch_stride_a = L;
  v_up.b = static_cast<const char*>(impl.w_uv->data()) + size_t(first_head * L * V) * size_t(dtype_size(dtype));
  v_up.b_dtype = dtype, v_up.ldb = V, v_up.batch_stride_b = L * V;
  v_up.c = out_rows.data(), v_up.c_dtype = out_rows.dtype(), v_up.ldc = out_rows.stride(0), v_up.batch_stride_c = V;
  gemm(v_up, impl.run_context());
}

}  // namespace lattn::detail
