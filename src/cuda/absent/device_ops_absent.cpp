// The CUDA device-ops table of a build without CUDA (see core/ops/device_ops.h):
// every entry refuses with one sentence, so a device tensor reaching the core
// fails clearly instead of crashing, and the device query says why there is
// no device.
#include "core/ops/device_ops.h"
#include "lattn/errors.h"

namespace lattn::detail {
namespace {

constexpr const char* kReason = "lattn was built without CUDA";

[[noreturn]] void no_cuda(const char* what) {
  throw ValueError(std::string(what) + ": a CUDA tensor or device was given, but " + kReason);
}

}  // namespace

const DeviceOps& cuda_device_ops() {
  static const DeviceOps table = [] {
    DeviceOps t;
    t.name = "cuda";
    t.absent_reason = kReason;
    t.malloc = [](size_t, int) -> void* { no_cuda("device_malloc"); };
    t.free = [](void*, int) noexcept {};
    t.memcpy = [](void*, Device, const void*, Device, size_t, Stream) { no_cuda("memcpy"); };
    t.memset = [](void*, int, size_t, int, Stream) { no_cuda("memset"); };
    t.memcpy_2d = [](void*, size_t, const void*, size_t, size_t, size_t, int, Stream) { no_cuda("memcpy_2d"); };
    t.synchronize = [](Stream) {};
    t.query_devices = [] { return CudaDeviceQuery{{}, kReason}; };
    t.concat_and_cache_mla = [](const Tensor&, const Tensor&, const LatentCache&, const Tensor&, Stream) {
      no_cuda("concat_and_cache_mla");
    };
    t.gather_cache = [](const LatentCache&, const Tensor&, const Tensor&, const Tensor&, int, const Tensor&, Stream) {
      no_cuda("gather_cache");
    };
    t.merge_attn_states = [](const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             Stream) { no_cuda("merge_attn_states"); };
    t.copy_blocks = [](std::span<const LatentCache>, const Tensor&, Stream) { no_cuda("copy_blocks"); };
    t.swap_blocks = [](const LatentCache&, const LatentCache&, const Tensor&, Stream) { no_cuda("swap_blocks"); };
    t.advance_step = [](int, int, int, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, Stream) { no_cuda("advance_step"); };
    t.quantize_fp8 = [](const Tensor&, const Tensor&, const Tensor&, Stream) { no_cuda("quantize_fp8"); };
    t.concat_and_cache_ds_mla = [](const Tensor&, const Tensor&, const LatentCache&, const Tensor&, Stream) {
      no_cuda("concat_and_cache_mla (fp8_ds_mla)");
    };
    t.gather_cache_ds_mla = [](const LatentCache&, const Tensor&, const Tensor&, const Tensor&, int, const Tensor&,
                               Stream) { no_cuda("gather_cache (fp8_ds_mla)"); };
    t.sparse_mla = [](const SparseMlaArgs&, const LatentCache&, Stream) { no_cuda("sparse_mla"); };
    t.indexer_k_cache_write = [](const Tensor&, const IndexerKeyCache&, const Tensor&, Stream) {
      no_cuda("indexer_k_cache_write");
    };
    t.indexer_logits = [](const IndexerArgs&, const IndexerKeyCache&, const Tensor&, bool) {
      no_cuda("indexer_logits");
    };
    t.indexer_topk = [](const IndexerArgs&, const IndexerKeyCache&, const Tensor&, bool) { no_cuda("indexer_topk"); };
    t.topk_positions = [](const Tensor&, const Tensor&, const Tensor&, Stream) { no_cuda("topk_positions"); };
    t.gemm = [](const GemmProblem&, const RunContext&) { no_cuda("gemm"); };
    return t;
  }();
  return table;
}

}  // namespace lattn::detail
