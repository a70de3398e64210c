// AVX-512 version of dequant_ds_mla_rows_bf16 (src/cpu/sparse_cpu.h):
// fp8_ds_mla entries -> bf16 rows, 16 elements per step, bit-identical to
// the scalar version. Compiled with AVX-512 flags only; called after a
// CPUID check. No inline functions with external linkage (docs/cpu.md).
// GCC 12 reports its own _mm512_cvtph_ps (avx512fintrin.h's undefined
// pass-through vector) as "may be used uninitialized" once inlined here; the
// warning is about the header, not this code, and -Werror builds need it off.
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized (the fuzz build)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "cpu/sparse_cpu.h"

namespace lattn::cpu {
namespace {

// e4m3 bytes -> f32 lanes: the 7 magnitude bits shifted into an f16 (bias 15
// vs 7) give value / 256 exactly, subnormals included; 0x7f / 0xff are NaN.
__m512 fp8x16_to_f32_over_256(__m128i bytes) {
  const __m256i b = _mm256_cvtepu8_epi16(bytes);
  const __m256i mag = _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), 7);
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8);
  const __m512 v = _mm512_cvtph_ps(_mm256_or_si256(mag, sign));
  const __mmask16 nan = _mm_cmpeq_epi8_mask(_mm_and_si128(bytes, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
  return _mm512_mask_blend_ps(nan, v, _mm512_set1_ps(__builtin_nanf("")));
}

// f32 -> bf16, round to nearest even, NaN quiet (lattn::f32_to_bf16).
__m256i f32_to_bf16x16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

}  // namespace

void dequant_ds_mla_rows_bf16_avx512(const uint8_t* cache_base, const int64_t* row_offsets, int rows, int kv_lora_rank,
                                     int rope_dim, uint16_t* out) {
  const int width = kv_lora_rank + rope_dim, tiles = kv_lora_rank / 128;
  const int entry_bytes = kv_lora_rank + 4 * tiles + 2 * rope_dim;
  for (int r = 0; r < rows; ++r) {
    // Rows are scattered over the cache: fetch a few rows ahead so their
    // memory latency overlaps this row's work.
    if (r + 4 < rows) {
      const char* next = reinterpret_cast<const char*>(cache_base + row_offsets[r + 4]);
      for (int b = 0; b < entry_bytes; b += 64) _mm_prefetch(next + b, _MM_HINT_T0);
    }
    const uint8_t* e = cache_base + row_offsets[r];
    uint16_t* o = out + int64_t(r) * width;
    for (int tile = 0; tile < tiles; ++tile) {
      float scale;
      std::memcpy(&scale, e + kv_lora_rank + 4 * tile, 4);
      // (v / 256) · (256 · scale): 256 · scale is exact, so one rounding as the scalar v · scale.
      const __m512 s = _mm512_set1_ps(scale * 256.f);
      for (int i = tile * 128; i < (tile + 1) * 128; i += 16) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e + i));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i),
                            f32_to_bf16x16(_mm512_mul_ps(fp8x16_to_f32_over_256(bytes), s)));
      }
    }
    std::memcpy(o + kv_lora_rank, e + kv_lora_rank + 4 * tiles, size_t(rope_dim) * 2);
  }
}

}  // namespace lattn::cpu
