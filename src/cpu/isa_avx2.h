#pragma once
// src/cpu/isa_avx2.h — the AVX2 + FMA + F16C policy of the CPU attention
// kernels (see attention_kernels_impl.h for the contract). Include only from
// *_avx2.cpp files (they alone have the AVX2 flags).
#include "cpu/simd_intrinsics.h"

#include <cstdint>
#include <cstring>

#include "lattn/dtype.h"

namespace lattn::cpu {
namespace {  // internal linkage: see attention_kernels_impl.h

struct Avx2 {
  static constexpr int W = 8;
  // Register blocks (16 ymm registers): 2 groups x 4 keys / dims, or 1 x 8.
  static constexpr int kQkKeys2 = 4, kQkKeys1 = 8, kPvDims2 = 4, kPvDims1 = 8;
  using F = __m256;

  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }  // b when either is NaN

  // 2^x as in Avx512::exp2, with 2^n built in the exponent bits; x is
  // clamped to -127, whose 2^n bit pattern is exactly +0.
  static F exp2(F x) {
    x = _mm256_max_ps(_mm256_set1_ps(-127.f), x);
    const F n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const F f = _mm256_sub_ps(x, n);
    F p = _mm256_set1_ps(1.5403530393381606e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618129107628477e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550410866482158e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.2402265069591007f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.6931471805599453f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  }

  static F mask_keys(F x, const int32_t* lane_end, int key) {
    const __m256i end = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lane_end));
    const __m256 visible = _mm256_castsi256_ps(_mm256_cmpgt_epi32(end, _mm256_set1_epi32(key)));
    return _mm256_blendv_ps(_mm256_set1_ps(-__builtin_inff()), x, visible);
  }

  static F neg_inf_to_zero(F x) {
    const __m256 is_neg_inf = _mm256_cmp_ps(x, _mm256_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
    return _mm256_blendv_ps(x, _mm256_setzero_ps(), is_neg_inf);
  }

  // dst[j * dst_stride + i] = src[i * src_stride + j] for i, j < 8.
  static void transpose(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
      r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
      r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; ++i) {
      _mm256_storeu_ps(dst + i * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
      _mm256_storeu_ps(dst + (i + 4) * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
  }

  // 8 values at p (all 8 readable) to f32; fp8 as in Avx512::fp8x16_to_f32.
  static F load8_as_f32(const void* p, DType t) {
    switch (t) {
      case DType::f32:
        return _mm256_loadu_ps(static_cast<const float*>(p));
      case DType::f16:
        return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
      case DType::bf16: {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
      }
      case DType::fp8_e4m3: {
        const __m128i v = _mm_cvtepu8_epi16(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
        const __m128i mag = _mm_and_si128(v, _mm_set1_epi16(0x7f));
        const __m128i sign = _mm_slli_epi16(_mm_and_si128(v, _mm_set1_epi16(0x80)), 8);
        const F f = _mm256_mul_ps(_mm256_cvtph_ps(_mm_or_si128(sign, _mm_slli_epi16(mag, 7))), _mm256_set1_ps(256.f));
        const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f))));
        return _mm256_blendv_ps(f, _mm256_set1_ps(__builtin_nanf("")), nan);
      }
      default:
        return _mm256_setzero_ps();
    }
  }

  static int elem_bytes(DType t) { return t == DType::f32 ? 4 : (t == DType::fp8_e4m3 ? 1 : 2); }

  static void to_f32(const void* src, DType t, int64_t n, float* dst) {
    const int es = elem_bytes(t);
    const char* s = static_cast<const char*>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8_as_f32(s + i * es, t));
    if (i < n) {  // tail through a zero-padded copy (no masked 8/16-bit loads in AVX2)
      alignas(32) char tmp[32] = {};
      std::memcpy(tmp, s + i * es, size_t(n - i) * es);
      alignas(32) float out[8];
      _mm256_store_ps(out, load8_as_f32(tmp, t));
      std::memcpy(dst + i, out, size_t(n - i) * 4);
    }
  }

  // 8 f32 -> bf16 bits (round to nearest even, NaN kept quiet) in the low 128 bits.
  static __m128i f32_to_bf16x8(F x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    const __m256i packed = _mm256_packus_epi32(r, r);  // values <= 0xffff: no saturation
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
  }

  static void store8_from_f32(F x, DType t, void* p) {
    switch (t) {
      case DType::f32:
        _mm256_storeu_ps(static_cast<float*>(p), x);
        break;
      case DType::f16:
        _mm_storeu_si128(static_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        break;
      case DType::bf16:
        _mm_storeu_si128(static_cast<__m128i*>(p), f32_to_bf16x8(x));
        break;
      default:
        break;
    }
  }

  static void from_f32(const float* src, int64_t n, DType t, void* dst) {
    const int es = elem_bytes(t);
    char* d = static_cast<char*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) store8_from_f32(_mm256_loadu_ps(src + i), t, d + i * es);
    if (i < n) {
      alignas(32) float in[8] = {};
      std::memcpy(in, src + i, size_t(n - i) * 4);
      alignas(32) char out[32];
      store8_from_f32(_mm256_load_ps(in), t, out);
      std::memcpy(d + i * es, out, size_t(n - i) * es);
    }
  }
};

}  // namespace
}  // namespace lattn::cpu
