// Tensor-map construction for the bulk tensor copy engine (see tma_host.h).
#include "cuda/sm90/common/tma_host.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <mutex>

#include "lattn/errors.h"

namespace lattn::cuda::sm90 {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status);
    if (err == cudaSuccess && status == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  });
  if (!fn) {
    throw RuntimeError(
        "tensor map: the CUDA driver does not provide cuTensorMapEncodeTiled (a driver for CUDA 12.0 or later is "
        "needed for the bulk tensor copy engine)");
  }
  return fn;
}

[[noreturn]] void fail(const TensorMapSpec& s, const std::string& field, const std::string& expected,
                       const std::string& got) {
  throw ValueError("tensor map for " + s.name + ": " + field + " must be " + expected + ", got " + got);
}

int swizzle_span(CUtensorMapSwizzle s) {
  switch (s) {
    case CU_TENSOR_MAP_SWIZZLE_32B:
      return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B:
      return 64;
    case CU_TENSOR_MAP_SWIZZLE_128B:
      return 128;
    default:
      return 0;
  }
}

}  // namespace

CUtensorMap make_tensor_map(const TensorMapSpec& s) {
  const size_t rank = s.dims.size();
  if (rank < 1 || rank > 5) fail(s, "rank", "1..5", std::to_string(rank));
  if (s.strides.size() != rank - 1)
    fail(s, "strides", std::to_string(rank - 1) + " values", std::to_string(s.strides.size()));
  if (s.box.size() != rank) fail(s, "box", std::to_string(rank) + " values", std::to_string(s.box.size()));
  if (reinterpret_cast<uintptr_t>(s.base) % 16 != 0) {
    fail(s, "global address", "16-byte aligned", std::to_string(reinterpret_cast<uintptr_t>(s.base)));
  }
  for (size_t i = 0; i < rank; ++i) {
    if (s.dims[i] < 1 || s.dims[i] > (cuuint64_t(1) << 32)) {
      fail(s, "dims[" + std::to_string(i) + "]", "1..2^32", std::to_string(s.dims[i]));
    }
    if (s.box[i] < 1 || s.box[i] > 256) fail(s, "box[" + std::to_string(i) + "]", "1..256", std::to_string(s.box[i]));
  }
  for (size_t i = 0; i + 1 < rank; ++i) {
    if (s.strides[i] % 16 != 0 || s.strides[i] >= (uint64_t(1) << 40)) {
      fail(s, "strides[" + std::to_string(i) + "] (bytes, dimension " + std::to_string(i + 1) + ")",
           "a multiple of 16 below 2^40", std::to_string(s.strides[i]));
    }
  }
  const uint64_t inner_bytes = uint64_t(s.box[0]) * uint64_t(s.element_bytes);
  if (inner_bytes % 16 != 0) fail(s, "box[0] bytes", "a multiple of 16", std::to_string(inner_bytes));
  const int span = swizzle_span(s.swizzle);
  if (span > 0 && inner_bytes > uint64_t(span)) {
    fail(s, "box[0] bytes", "at most the swizzle span " + std::to_string(span), std::to_string(inner_bytes));
  }

  CUtensorMap map{};
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult r = encode_fn()(&map, s.dtype, cuuint32_t(rank), const_cast<void*>(s.base), s.dims.data(),
                                 s.strides.data(), s.box.data(), element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 s.swizzle, s.l2_promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw RuntimeError("tensor map for " + s.name + ": cuTensorMapEncodeTiled failed with CUresult " +
                       std::to_string(int(r)));
  }
  return map;
}

}  // namespace lattn::cuda::sm90
