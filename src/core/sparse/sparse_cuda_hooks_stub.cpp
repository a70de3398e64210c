// The sparse-MLA CUDA hooks of a build without CUDA: every entry point
// refuses with one sentence (src/core/sparse/sparse_cuda_hooks.h).
#ifndef LATTN_WITH_CUDA

#include <string>

#include "core/sparse/sparse_cuda_hooks.h"
#include "lattn/errors.h"

namespace lattn::cuda_hooks {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw ValueError(std::string(what) + ": a CUDA tensor or device was given, but lattn was built without CUDA");
}
}  // namespace

void concat_and_cache_ds_mla(const Tensor&, const Tensor&, const LatentCache&, const Tensor&, Stream) {
  no_cuda("concat_and_cache_mla (fp8_ds_mla)");
}
void gather_cache_ds_mla(const LatentCache&, const Tensor&, const Tensor&, const Tensor&, int, const Tensor&,
                         Stream) {
  no_cuda("gather_cache (fp8_ds_mla)");
}
void sparse_mla(const SparseMlaArgs&, const LatentCache&, Stream) { no_cuda("sparse_mla"); }
bool has_sparse_kernels() { return false; }

}  // namespace lattn::cuda_hooks

#endif  // LATTN_WITH_CUDA
