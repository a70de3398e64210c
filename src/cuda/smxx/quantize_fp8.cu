// quantize_fp8 on CUDA: MlaAttention's fp8 output, dst = fp8(src / scale[0]),
// with the host's rounding (a true division; RNE; saturation to ±448). The
// scale is read on the device, so a captured graph sees a new scale value.
#include <cuda_runtime.h>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/device_ops.h"

namespace lattn::cuda {
namespace {

struct QuantizeParams {
  const void* src;     // [rows, cols], row stride src_stride (elements)
  fp8_t* dst;          // [rows, cols], row stride dst_stride
  const float* scale;  // [1] on the device
  int64_t src_stride, dst_stride, rows, cols;
};

// One thread per 8 elements when rows are 16-byte aligned, else per element.
template <class T, bool kVec>
__global__ void quantize_fp8_kernel(QuantizeParams p) {
  const int64_t per_row = kVec ? p.cols / 8 : p.cols;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.rows * per_row) return;
  const int64_t r = i / per_row, c = (i % per_row) * (kVec ? 8 : 1);
  const float scale = *p.scale;
  const T* src = static_cast<const T*>(p.src) + r * p.src_stride + c;
  fp8_t* dst = p.dst + r * p.dst_stride + c;
  if constexpr (kVec) {
    float x[8];
    load8(src, x);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] /= scale;
    store8(dst, x);
  } else {
    *dst = from_f32<fp8_t>(to_f32(*src) / scale);
  }
}

}  // namespace
}  // namespace lattn::cuda

namespace lattn::cuda {

void quantize_fp8(const Tensor& src, const Tensor& dst, const Tensor& scale, Stream stream) {
  using namespace lattn::cuda;
  QuantizeParams p{src.data(),  dst.data_as<fp8_t>(), scale.data_as<const float>(), src.stride(0), dst.stride(0),
                   src.size(0), src.size(1)};
  if (p.rows * p.cols == 0) return;
  DeviceGuard guard(dst.device().index);
  const int es = src.element_size();
  const bool vec = p.cols % 8 == 0 && is_aligned(p.src, 16) && (p.src_stride * es) % 16 == 0 && is_aligned(p.dst, 8) &&
                   p.dst_stride % 8 == 0;
  const int64_t work = p.rows * (vec ? p.cols / 8 : p.cols);
  constexpr int kThreads = 256;
  const dim3 grid(unsigned((work + kThreads - 1) / kThreads));
  auto s = reinterpret_cast<cudaStream_t>(stream);
  LATTN_DISPATCH_FLOAT_TYPES(src.dtype(), "quantize_fp8", "src", [&] {
    if (vec) {
      quantize_fp8_kernel<T, true><<<grid, kThreads, 0, s>>>(p);
    } else {
      quantize_fp8_kernel<T, false><<<grid, kThreads, 0, s>>>(p);
    }
  });
  LATTN_CUDA_CHECK_LAUNCH("quantize_fp8_kernel");
}

}  // namespace lattn::cuda
