// src/cuda/common/fast_math.cuh — the register-level float helpers of the
// attention kernels' inner loops, one definition for every architecture
// (sm80 decode / prefill / sparse, the Hopper kernels, the split-KV combines):
// f32 -> 16-bit packing, ex2 on the special-function unit and a
// NaN-propagating max. Each is one PTX instruction of sm80 and later.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace lattn::cuda {

// Two floats rounded to T (to nearest even) and packed into one 32-bit
// register, `lo` in the low half (the lower column index).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "pack2: bf16 or f16");
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// Lazy rescaling of an online softmax (the Hopper decode kernels): the
// running max (log2 units) stays until a tile's max exceeds it by more than
// this, so most tiles leave O unscaled; P = 2^(s - m) is then at most 2^8,
// which f16 and bf16 hold at full relative precision.
constexpr float kLazyRescaleLog2 = 8.f;

// 2^x on the special-function unit (x = -inf gives 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

// max(a, b) that returns NaN when either is NaN (PTX max.NaN; fmaxf would
// drop the NaN): a NaN score, or a split part that attended to a NaN, makes
// its row NaN (docs/mla.md).
__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

}  // namespace lattn::cuda
