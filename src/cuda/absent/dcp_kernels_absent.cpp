// The GPU steps of dcp_combine in a build without CUDA (core/dcp/dcp_kernels.h):
// each refuses, so a device tensor reaching dcp_combine fails clearly.
#include "core/dcp/dcp_kernels.h"
#include "lattn/errors.h"

namespace lattn::detail {
namespace {
[[noreturn]] void no_cuda() {
  throw ValueError("dcp_combine: a CUDA tensor was given, but lattn was built without CUDA");
}
}  // namespace

const DcpKernels& dcp_cuda_kernels() {
  static const DcpKernels k{
      [](const Tensor&, const Tensor&, const Tensor&, Stream) { no_cuda(); },
      [](const Tensor&, const Tensor&, const Tensor&, int, const Tensor&, const Tensor&, Stream) { no_cuda(); },
      [](const Tensor&, const Tensor&, const Tensor&, Stream) { no_cuda(); },
      [](const Tensor&, const Tensor&, const Tensor&, Stream) { no_cuda(); },
      [](const Tensor&, const Tensor&, const Tensor&, const Tensor&, Stream) { no_cuda(); },
      [](const Tensor&, Stream) { no_cuda(); },
  };
  return k;
}

}  // namespace lattn::detail
