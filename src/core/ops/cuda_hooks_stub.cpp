// Definitions of the CUDA hooks for builds without CUDA: every entry point
// refuses with one sentence, so a device tensor reaching the core fails
// clearly instead of crashing.
#ifndef LATTN_WITH_CUDA

#include "core/ops/cuda_hooks.h"

#include "lattn/errors.h"

namespace lattn::cuda_hooks {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw ValueError(std::string(what) + ": a CUDA tensor or device was given, but lattn was built without CUDA");
}
}  // namespace

void* device_malloc(size_t, int) { no_cuda("device_malloc"); }
void device_free(void*, int) noexcept {}
void memcpy_any(void*, Device, const void*, Device, size_t, Stream) { no_cuda("memcpy"); }
void memset_device(void*, int, size_t, int, Stream) { no_cuda("memset"); }
void memcpy_2d(void*, size_t, Device, const void*, size_t, Device, size_t, size_t, Stream) { no_cuda("memcpy_2d"); }
void synchronize(Stream) {}
CudaDeviceQuery query_devices() { return {{}, "lattn was built without CUDA"}; }
void concat_and_cache_mla(const Tensor&, const Tensor&, const LatentCache&, const Tensor&, Stream) {
  no_cuda("concat_and_cache_mla");
}
void gather_cache(const LatentCache&, const Tensor&, const Tensor&, const Tensor&, int, const Tensor&, Stream) {
  no_cuda("gather_cache");
}
void merge_attn_states(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       Stream) {
  no_cuda("merge_attn_states");
}
void copy_blocks(std::span<const LatentCache>, const Tensor&, Stream) { no_cuda("copy_blocks"); }
void advance_step(int, int, int, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                  const Tensor&, Stream) {
  no_cuda("advance_step");
}
void quantize_fp8(const Tensor&, const Tensor&, const Tensor&, Stream) { no_cuda("quantize_fp8"); }

}  // namespace lattn::cuda_hooks

#endif  // LATTN_WITH_CUDA

#ifndef LATTN_WITH_CUDA
namespace lattn::cuda_hooks {
void gemm(const detail::GemmProblem&, int, Stream) { no_cuda("gemm"); }
}  // namespace lattn::cuda_hooks
#endif
