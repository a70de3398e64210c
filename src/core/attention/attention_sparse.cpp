// The rows of a sparse layer (config.index_topk > 0; DeepSeek-V3.2's DSA,
// docs/sparse.md). The forward validated the step once (validate_forward,
// validate_indexer_inputs), so the ops below are called through the
// device-ops table and the sparse class directly, without their checks. Decode and prefill rows run the same way,
// because the indexer's top-k already says which cached tokens each row sees:
//   1. the step's indexer keys go to the indexer cache (the latents went to
//      the latent cache before, in forward)
//   2. indices[t] = the index_topk slots of t's own request, positions
//      <= t's position, that score highest (indexer_topk; -1 padded)
//   3. absorbed queries: qa[t, n] = [q_nope[t, n] · W_UK_T[n] | q_pe[t, n]]  [Tc, N, L+R]
//   4. o = sparse_mla(qa, cache, indices)                                    [Tc, N, L]
//   5. out[t, n*V:(n+1)*V] = o[t, n] · W_UV[n]                               [Tc, N*V]
#include <algorithm>
#include <string>

#include "core/attention/attention_impl.h"
#include "core/ops/device_ops.h"
#include "core/ops/forward_ops.h"
#include "lattn/check.h"
#include "lattn/sparse.h"

namespace lattn::detail {

void validate_indexer_inputs(const MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache,
                             const IndexerInputs& in) {
  const char* op = "MlaAttention.forward";
  const MlaAttentionConfig& c = impl.config;
  const int64_t T = args.num_tokens, H = c.index_n_heads, D = c.index_head_dim;
  check_arg(in.cache != nullptr, op, "indexer.cache", "be the layer's indexer key cache", "nullptr");
  const IndexerKeyCache& ic = *in.cache;
  ic.validate(op);
  check_device(op, "indexer.cache", ic.data, c.device);
  check_arg(ic.head_dim == D, op, "indexer.cache", "have head_dim = config.index_head_dim = " + std::to_string(D),
            std::to_string(ic.head_dim));
  check_arg(ic.num_blocks() == cache.num_blocks() && ic.block_size() == cache.block_size(), op, "indexer.cache",
            "have the latent cache's blocks [" + std::to_string(cache.num_blocks()) + ", " +
                std::to_string(cache.block_size()) + "]",
            "[" + std::to_string(ic.num_blocks()) + ", " + std::to_string(ic.block_size()) + "]");
  check_defined(op, "indexer.q", in.q);
  check_dtype_in(op, "indexer.q", in.q, {c.dtype, DType::f32});
  check_device(op, "indexer.q", in.q, c.device);
  check_shape(op, "indexer.q", in.q, {T, H, D});
  check_last_dim_contiguous(op, "indexer.q", in.q);
  check_defined(op, "indexer.k", in.k);
  check_dtype_in(op, "indexer.k", in.k, {c.dtype, DType::f32});
  check_device(op, "indexer.k", in.k, c.device);
  check_shape(op, "indexer.k", in.k, {T, D});
  check_last_dim_contiguous(op, "indexer.k", in.k);
  check_defined(op, "indexer.weights", in.weights);
  check_dtype(op, "indexer.weights", in.weights, DType::f32);
  check_device(op, "indexer.weights", in.weights, c.device);
  check_shape(op, "indexer.weights", in.weights, {T, H});
  check_last_dim_contiguous(op, "indexer.weights", in.weights);
}

void forward_sparse(MlaAttention::Impl& impl, const ForwardArgs& args, const LatentCache& cache, const MlaMetadata& md,
                    const IndexerInputs& in, const Tensor& out_rows) {
  const MlaDims& d = impl.dims();
  const MlaAttentionConfig& c = impl.config;
  const int64_t Tc = out_rows.size(0), N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim,
                R = d.qk_rope_head_dim;
  const DType dtype = c.dtype;
  const Stream stream = c.stream;
  const bool on_device = c.device.is_cuda();

  // 1. The step's indexer keys (padding slots are -1 and skipped).
  const DeviceOps& dev = device_ops(c.device);
  const Tensor slots = on_device ? md.slot_mapping : md.slot_mapping_cpu;  // checked against the same capacity
  if (args.write_cache && slots.size(0) > 0) dev.indexer_k_cache_write(in.k, *in.cache, slots, stream);

  // 2. Top-k slots of every computed row, over the whole batch's requests.
  const Tensor indices = impl.workspace.get(WorkspaceSlot::sparse_indices, {Tc, c.index_topk}, DType::i32);
  IndexerArgs ia;
  ia.q = in.q.narrow(0, 0, Tc);
  ia.weights = in.weights.narrow(0, 0, Tc);
  ia.block_table = on_device ? md.block_table : md.block_table_cpu;
  ia.query_start_loc = on_device ? md.query_start_loc : md.query_start_loc_cpu;
  ia.seq_lens = on_device ? md.seq_lens : md.seq_lens_cpu;
  // The device arrays are not read back: the row width comes from the metadata.
  ia.max_seq_len = on_device ? std::max(md.max_decode_seq_len, md.max_prefill_seq_len) : 0;
  ia.stream = stream;
  dev.indexer_topk(ia, *in.cache, indices, c.indexer_backend == "reference");

  // 3. Absorb W_UK into q_nope (one GEMM per head) and append q_pe.
  const Tensor q = args.q.narrow(0, 0, Tc);  // [Tc, N, P+R], strided
  const Tensor qa = impl.workspace.get(WorkspaceSlot::sparse_q, {Tc, N, L + R}, dtype);
  absorb_q_nope(impl, q, qa);
  copy_leading_columns(q.narrow(2, P, R), qa.narrow(2, L, R), stream);

  // 4. Sparse attention over the picked slots (latent output, no LSE needed).
  const Tensor latent_out = impl.workspace.get(WorkspaceSlot::decode_out, {Tc, N, L}, dtype);
  SparseMlaArgs sa;
  sa.q = qa;
  sa.indices = indices;
  sa.out = latent_out;
  sa.scale = c.scale;
  impl.sparse_class->run(sa, cache, stream);  // the indices come from the indexer: in range or -1

  // 5. V up-projection into out's head columns.
  up_project_v(impl, latent_out, out_rows);
}

}  // namespace lattn::detail
