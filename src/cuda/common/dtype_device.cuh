// src/cuda/common/dtype_device.cuh — element types on the device: the C++
// type of each lattn::DType, conversions to and from f32 with the same
// rounding as the host (RNE; fp8 saturates to ±448, NaN stays NaN), and
// 16-byte vector helpers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "lattn/dtype.h"

namespace lattn::cuda {

using bf16_t = __nv_bfloat16;
using f16_t = __half;
using fp8_t = __nv_fp8_e4m3;

template <class T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_f32<f16_t>(f16_t v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f32<bf16_t>(bf16_t v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_f32<fp8_t>(fp8_t v) {
  return float(v);
}

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ f16_t from_f32<f16_t>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ bf16_t from_f32<bf16_t>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ fp8_t from_f32<fp8_t>(float v) {
  // __NV_SATFINITE: out-of-range values (and ±inf) become ±448; NaN stays NaN,
  // exactly the host's f32_to_fp8e4m3.
  fp8_t r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
}

// Element load/store of a runtime dtype (slow paths: unaligned or mixed types).
__device__ __forceinline__ float load_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(p)[i];
    case DType::f16:
      return to_f32(static_cast<const f16_t*>(p)[i]);
    case DType::bf16:
      return to_f32(static_cast<const bf16_t*>(p)[i]);
    case DType::fp8_e4m3:
      return to_f32(static_cast<const fp8_t*>(p)[i]);
    default:
      return 0.f;
  }
}
__device__ __forceinline__ void store_f32(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(p)[i] = v;
      break;
    case DType::f16:
      static_cast<f16_t*>(p)[i] = from_f32<f16_t>(v);
      break;
    case DType::bf16:
      static_cast<bf16_t*>(p)[i] = from_f32<bf16_t>(v);
      break;
    case DType::fp8_e4m3:
      static_cast<fp8_t*>(p)[i] = from_f32<fp8_t>(v);
      break;
    default:
      break;
  }
}

// Eight consecutive elements of T, loaded or stored as one vector access
// (16 bytes for 16-bit types, 32 for f32 as two 16-byte halves, 8 for fp8).
template <class T>
struct Vec8 {
  T v[8];
};
template <class T>
__device__ __forceinline__ void load8(const T* p, float (&out)[8]) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4);
  if constexpr (sizeof(T) == 4) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else if constexpr (sizeof(T) == 2) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = to_f32(e[i]);
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = to_f32(e[i]);
  }
}
template <class T>
__device__ __forceinline__ void store8(T* p, const float (&in)[8]) {
  if constexpr (sizeof(T) == 4) {
    reinterpret_cast<float4*>(p)[0] = make_float4(in[0], in[1], in[2], in[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(in[4], in[5], in[6], in[7]);
  } else if constexpr (sizeof(T) == 2) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = from_f32<T>(in[i]);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
    uint2 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = from_f32<T>(in[i]);
    *reinterpret_cast<uint2*>(p) = raw;
  }
}

// True when p is aligned to `bytes`.
__host__ __device__ inline bool is_aligned(const void* p, int bytes) {
  return (reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes)) == 0;
}

}  // namespace lattn::cuda
