// Temporary CUDA definitions of the op hooks until the CUDA backend's kernels
// land (issue: CUDA backend). They refuse clearly instead of failing to link.
// This file is deleted by the CUDA backend work.
#include "core/cuda_hooks.h"
#include "lattn/errors.h"

namespace lattn::cuda_hooks {
namespace {
[[noreturn]] void pending(const char* op) {
  throw NotImplementedError(std::string(op) + " on CUDA tensors is not implemented yet");
}
}  // namespace

void concat_and_cache_mla(const Tensor&, const Tensor&, const LatentCache&, const Tensor&, Stream) {
  pending("concat_and_cache_mla");
}
void gather_cache(const LatentCache&, const Tensor&, const Tensor&, const Tensor&, int, const Tensor&, Stream) {
  pending("gather_cache");
}
void merge_attn_states(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       Stream) {
  pending("merge_attn_states");
}
void copy_blocks(std::span<const LatentCache>, const Tensor&, Stream) { pending("copy_blocks"); }
void quantize_fp8(const Tensor&, const Tensor&, const Tensor&, Stream) { pending("quantize_fp8"); }

}  // namespace lattn::cuda_hooks

namespace lattn::cuda_hooks {
void gemm(const detail::GemmProblem&, int, Stream) { pending("gemm"); }
}  // namespace lattn::cuda_hooks
