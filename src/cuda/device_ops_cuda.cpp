// The CUDA device-ops table (see core/ops/device_ops.h): the entries are the
// implementations of cuda/device_ops.h.
#include "core/ops/device_ops.h"
#include "cuda/device_ops.h"

namespace lattn::detail {

const DeviceOps& cuda_device_ops() {
  static const DeviceOps table = [] {
    DeviceOps t;
    t.name = "cuda";
    t.malloc = cuda::device_malloc;
    t.free = cuda::device_free;
    t.memcpy = cuda::memcpy_any;
    t.memset = cuda::memset_device;
    t.memcpy_2d = [](void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
                     int device, Stream stream) {
      cuda::memcpy_2d(dst, dst_pitch, Device::cuda(device), src, src_pitch, Device::cuda(device), row_bytes, rows,
                      stream);
    };
    t.synchronize = cuda::synchronize;
    t.query_devices = cuda::query_devices;
    t.concat_and_cache_mla = cuda::concat_and_cache_mla;
    t.gather_cache = cuda::gather_cache;
    t.merge_attn_states = cuda::merge_attn_states;
    t.copy_blocks = cuda::copy_blocks;
    t.swap_blocks = cuda::swap_blocks;
    t.advance_step = cuda::advance_step;
    t.quantize_fp8 = cuda::quantize_fp8;
    t.concat_and_cache_ds_mla = cuda::concat_and_cache_ds_mla;
    t.gather_cache_ds_mla = cuda::gather_cache_ds_mla;
    t.sparse_mla = cuda::sparse_mla;
    t.indexer_k_cache_write = cuda::indexer_k_cache_write;
    t.indexer_logits = [](const IndexerArgs& a, const IndexerKeyCache& cache, const Tensor& logits, bool) {
      cuda::indexer_logits(a, cache, logits);  // the core refuses "reference" for device tensors
    };
    t.indexer_topk = [](const IndexerArgs& a, const IndexerKeyCache& cache, const Tensor& topk, bool) {
      cuda::indexer_topk(a, cache, topk);
    };
    t.topk_positions = cuda::topk_positions;
    t.gemm = [](const GemmProblem& p, const RunContext& ctx) {
      cuda::gemm(p, ctx.device.index, ctx.stream, ctx.batch_invariant);
    };
    return t;
  }();
  return table;
}

}  // namespace lattn::detail
