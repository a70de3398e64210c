#pragma once
// src/cpu/isa_avx512.h — the AVX-512 policy of the CPU attention kernels
// (see attention_kernels_impl.h for the contract). Include only from
// *_avx512.cpp files (they alone have the AVX-512 flags).
#include "cpu/simd_intrinsics.h"

#include <cstdint>
#include <cstring>

#include "lattn/dtype.h"

namespace lattn::cpu {
namespace {  // internal linkage: see attention_kernels_impl.h

struct Avx512 {
  static constexpr int W = 16;
  // Register blocks of the f32 path (32 zmm registers): scores 2 groups x 8
  // keys or 1 x 8 (more keys' row pointers would not fit in the general
  // registers), outputs 2 groups x 8 dims or 1 x 16.
  static constexpr int kQkKeys2 = 8, kQkKeys1 = 8, kPvDims2 = 8, kPvDims1 = 16;
  using F = __m512;

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F bcast(const float* p) { return _mm512_set1_ps(*p); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  // max(a, b), b when either is NaN (so NaN scores propagate as in the reference).
  static F max(F a, F b) { return _mm512_max_ps(a, b); }

  // 2^x: x = n + f with |f| <= 1/2, 2^f by its degree-6 Taylor polynomial
  // (relative error < 1.2e-7), scaled by 2^n with vscalefps. x is clamped
  // to -150 first, where 2^-150 rounds to exactly 0.
  static F exp2(F x) {
    x = _mm512_max_ps(_mm512_set1_ps(-150.f), x);
    const F n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const F f = _mm512_sub_ps(x, n);
    F p = _mm512_set1_ps(1.5403530393381606e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618129107628477e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550410866482158e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.2402265069591007f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931471805599453f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
    return _mm512_scalef_ps(p, n);
  }

  static F mask_keys(F x, const int32_t* lane_end, int key) {
    const __mmask16 visible = _mm512_cmpgt_epi32_mask(_mm512_loadu_si512(lane_end), _mm512_set1_epi32(key));
    return _mm512_mask_blend_ps(visible, _mm512_set1_ps(-__builtin_inff()), x);
  }

  static F neg_inf_to_zero(F x) {
    const __mmask16 is_neg_inf = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
    return _mm512_mask_blend_ps(is_neg_inf, x, _mm512_setzero_ps());
  }

  // 16 fp8 e4m3 values (in the low bytes of a 128-bit vector) to f32, exact:
  // the 7 magnitude bits moved into an f16's exponent/mantissa give the
  // value * 2^-8 (subnormals included); vcvtph2ps widens and *256 rescales.
  // 0x7f / 0xff are NaN.
  static F fp8x16_to_f32(__m128i bytes) {
    const __m256i v = _mm256_cvtepu8_epi16(bytes);
    const __m256i mag = _mm256_and_si256(v, _mm256_set1_epi16(0x7f));
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x80)), 8);
    const __m256i half = _mm256_or_si256(sign, _mm256_slli_epi16(mag, 7));
    F f = _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(256.f));
    const __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7f));
    return _mm512_mask_blend_ps(nan, f, _mm512_set1_ps(__builtin_nanf("")));
  }

  static F load16_as_f32(const void* src, DType t, int64_t i, __mmask16 k) {
    switch (t) {
      case DType::f32:
        return _mm512_maskz_loadu_ps(k, static_cast<const float*>(src) + i);
      case DType::f16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, static_cast<const uint16_t*>(src) + i));
      case DType::bf16: {
        const __m256i h = _mm256_maskz_loadu_epi16(k, static_cast<const uint16_t*>(src) + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      }
      case DType::fp8_e4m3:
        return fp8x16_to_f32(_mm_maskz_loadu_epi8(k, static_cast<const uint8_t*>(src) + i));
      default:
        return _mm512_setzero_ps();
    }
  }

  static void to_f32(const void* src, DType t, int64_t n, float* dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load16_as_f32(src, t, i, 0xffff));
    if (i < n) {
      const __mmask16 k = __mmask16((1u << (n - i)) - 1);
      _mm512_mask_storeu_ps(dst + i, k, load16_as_f32(src, t, i, k));
    }
  }

  // f32 -> bf16 bit patterns, round to nearest even, NaN kept quiet
  // (the same results as lattn::f32_to_bf16).
  static __m256i f32_to_bf16x16(F x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
  }

  static void store16_from_f32(F x, DType t, void* dst, int64_t i, __mmask16 k) {
    switch (t) {
      case DType::f32:
        _mm512_mask_storeu_ps(static_cast<float*>(dst) + i, k, x);
        break;
      case DType::f16:
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(dst) + i, k,
                                 _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        break;
      case DType::bf16:
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(dst) + i, k, f32_to_bf16x16(x));
        break;
      default:
        break;
    }
  }

  static void from_f32(const float* src, int64_t n, DType t, void* dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) store16_from_f32(_mm512_loadu_ps(src + i), t, dst, i, 0xffff);
    if (i < n) {
      const __mmask16 k = __mmask16((1u << (n - i)) - 1);
      store16_from_f32(_mm512_maskz_loadu_ps(k, src + i), t, dst, i, k);
    }
  }

  // dst[j * dst_stride + i] = src[i * src_stride + j] for i, j < 16: three
  // shuffle stages (pairs, quads, 128-bit lanes twice).
  static void transpose(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_stride);
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
      r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
      r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
      r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
      t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
      t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
      t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; ++i) {
      r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
      r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * dst_stride, r[i]);
  }

  // dst[d] = even[d] | odd[d] << 16 (odd == nullptr: zeros).
  static void pack_value_pairs(const uint16_t* even, const uint16_t* odd, int64_t n, uint32_t* dst) {
    // Output 16-bit element 2i <- even[i], 2i+1 <- odd[i], for each half.
    alignas(64) static constexpr uint16_t kLo[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                     8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    alignas(64) static constexpr uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                     24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
    const __m512i lo_idx = _mm512_load_si512(kLo), hi_idx = _mm512_load_si512(kHi);
    int64_t i = 0;
    for (; i < n; i += 32) {
      const int64_t left = n - i;
      const __mmask32 k = left >= 32 ? ~__mmask32(0) : __mmask32((1u << left) - 1);
      const __m512i a = _mm512_maskz_loadu_epi16(k, even + i);
      const __m512i b = odd ? _mm512_maskz_loadu_epi16(k, odd + i) : _mm512_setzero_si512();
      const __m512i lo = _mm512_permutex2var_epi16(a, lo_idx, b);
      const __m512i hi = _mm512_permutex2var_epi16(a, hi_idx, b);
      if (left >= 32) {
        _mm512_storeu_si512(dst + i, lo);
        _mm512_storeu_si512(dst + i + 16, hi);
      } else {
        const int lo_n = left >= 16 ? 16 : int(left);
        _mm512_mask_storeu_epi32(dst + i, __mmask16((1u << lo_n) - 1), lo);
        if (left > 16) _mm512_mask_storeu_epi32(dst + i + 16, __mmask16((1u << (left - 16)) - 1), hi);
      }
    }
  }
};

}  // namespace
}  // namespace lattn::cpu
