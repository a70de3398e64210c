#pragma once
// src/cpu/isa_scalar.h — the plain C++ policy of the CPU attention kernels
// (see attention_kernels_impl.h for the contract): a "vector" is an array of
// 8 floats and every operation a loop the compiler may vectorize for the
// baseline ISA. Include only from kernels_scalar.cpp (baseline flags, so
// the dtype.h helpers are safe to call here).
#include <cmath>
#include <cstdint>

#include "lattn/dtype.h"

namespace lattn::cpu {
namespace {  // internal linkage: see attention_kernels_impl.h

struct Scalar {
  static constexpr int W = 8;
  static constexpr int kQkKeys2 = 4, kQkKeys1 = 8, kPvDims2 = 4, kPvDims1 = 8;
  struct F {
    float v[W];
  };

  template <class Op>
  static F map(Op op) {
    F r;
    for (int i = 0; i < W; ++i) r.v[i] = op(i);
    return r;
  }
  static F zero() { return set1(0.f); }
  static F set1(float x) {
    return map([x](int) { return x; });
  }
  static F load(const float* p) {
    return map([p](int i) { return p[i]; });
  }
  static void store(float* p, const F& a) {
    for (int i = 0; i < W; ++i) p[i] = a.v[i];
  }
  static F bcast(const float* p) { return set1(*p); }
  static F fma(const F& a, const F& b, const F& c) {
    return map([&](int i) { return std::fma(a.v[i], b.v[i], c.v[i]); });
  }
  static F mul(const F& a, const F& b) {
    return map([&](int i) { return a.v[i] * b.v[i]; });
  }
  static F add(const F& a, const F& b) {
    return map([&](int i) { return a.v[i] + b.v[i]; });
  }
  static F sub(const F& a, const F& b) {
    return map([&](int i) { return a.v[i] - b.v[i]; });
  }
  // b when either is NaN, as maxps.
  static F max(const F& a, const F& b) {
    return map([&](int i) { return a.v[i] > b.v[i] ? a.v[i] : b.v[i]; });
  }
  static F exp2(const F& x) {
    return map([&](int i) { return std::exp2(x.v[i]); });
  }
  static F mask_keys(const F& x, const int32_t* lane_end, int key) {
    return map([&](int i) { return key < lane_end[i] ? x.v[i] : -INFINITY; });
  }
  static F neg_inf_to_zero(const F& x) {
    return map([&](int i) { return x.v[i] == -INFINITY ? 0.f : x.v[i]; });
  }

  static void transpose(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
    for (int i = 0; i < W; ++i) {
      for (int j = 0; j < W; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
    }
  }
  static void to_f32(const void* src, DType t, int64_t n, float* dst) {
    for (int64_t i = 0; i < n; ++i) dst[i] = lattn::load_as_f32(src, t, i);
  }
  static void from_f32(const float* src, int64_t n, DType t, void* dst) {
    for (int64_t i = 0; i < n; ++i) lattn::store_from_f32(dst, t, i, src[i]);
  }
  static void pack_value_pairs(const uint16_t* even, const uint16_t* odd, int64_t n, uint32_t* dst) {
    for (int64_t i = 0; i < n; ++i) dst[i] = uint32_t(even[i]) | (odd ? uint32_t(odd[i]) << 16 : 0u);
  }
};

}  // namespace
}  // namespace lattn::cpu
