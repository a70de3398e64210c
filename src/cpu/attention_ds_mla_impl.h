// src/cpu/attention_ds_mla_impl.h — the bf16_dot decode split read straight
// from fp8_ds_mla cache entries (internal; the `cpu` sparse backend's fused
// path). Include only from kernels_avx512.cpp, after attention_bf16_impl.h
// (internal linkage, as those).
//
// An fp8_ds_mla entry (docs/mla.md) holds L fp8 e4m3 latent values with one
// f32 scale per 128 of them, then R bf16 rope values. fp8 e4m3 values are
// exact in bf16, so each row is converted *unscaled* (a few integer
// instructions per 32 values, no rounding) and the scales are applied where
// they cost almost nothing:
//   scores  S[key] = sum_t scale_t(key) · (q_t · raw_t(key)) + q_rope · rope(key)
//           (one f32 partial sum per 128-dim segment, then one multiply);
//   output  OT[d] += sum_key (P[key] · scale_t(key)) · raw[key][d],  t = d / 128
//           (the probabilities packed once per segment, P·scale rounded to bf16
//           as the plain bf16 path rounds P).
// Against dequantizing each row to bf16 (value · scale in f32, rounded) and
// reading it back, this saves the f32 multiply and rounding of every latent
// value and one pass over the rows; the scores are also closer to the
// reference (raw values and scales exact, one f32 rounding per segment).
// A P·scale below bf16's smallest normal (2^-126) counts as 0, as a bf16 P
// does in the plain path: it matters only for tiles whose every value is
// below about 448 · 2^-110.
#pragma once

#include "cpu/attention_bf16_impl.h"

namespace lattn::cpu {
namespace {

constexpr int kDsTileDims = 128;  // latent elements per fp8_ds_mla scale (lattn::kFp8DsMlaTile)

// 32 fp8 e4m3 bytes -> 32 bf16 bit patterns, exact. A normal e4m3 value
// (exponent e of bias 7, 3 mantissa bits) is the bf16 with exponent e + 120
// and those bits on top of its 7: (magnitude << 4) + (120 << 7). The 8
// subnormal magnitudes (m · 2^-9) come from a table; 0x7f/0xff are NaN.
inline __m512i fp8x32_to_bf16(__m256i bytes) {
  alignas(64) static constexpr uint16_t kSubnormal[32] = {0x0000, 0x3b00, 0x3b80, 0x3bc0,
                                                          0x3c00, 0x3c20, 0x3c40, 0x3c60};
  const __m512i w = _mm512_cvtepu8_epi16(bytes);
  const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi16(0x7f));
  __m512i v = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(120 << 7));
  const __mmask32 subnormal = _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8));
  v = _mm512_mask_permutexvar_epi16(v, subnormal, mag, _mm512_load_si512(kSubnormal));
  const __mmask32 nan = _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7f));
  v = _mm512_mask_mov_epi16(v, nan, _mm512_set1_epi16(0x7fc0));
  return _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(w, _mm512_set1_epi16(0x80)), 8));
}

// One entry -> dst [L + R] bf16 (latent unscaled, rope as stored) and its
// L / 128 scales -> scales.
inline void ds_entry_to_bf16(const uint8_t* e, int latent, int rope, uint16_t* dst, float* scales) {
  const int tiles = latent / kDsTileDims;
  for (int i = 0; i < latent; i += 32) {
    _mm512_storeu_si512(dst + i, fp8x32_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + i))));
  }
  __builtin_memcpy(scales, e + latent, size_t(tiles) * 4);
  __builtin_memcpy(dst + latent, e + latent + 4 * tiles, size_t(rope) * 2);
}

// The whole score of KB keys: one scaled segment per 128 latent dims, then
// the rope dims unscaled. scales: key kk's at scales[kk * tiles].
template <int GB, int KB, int PU>
inline void qk_block_ds(const uint32_t* qp, int latent, int dim, const uint16_t* const* kr, const float* scales,
                        float* s, RowPrefetcher* pf) {
  const int tiles = latent / kDsTileDims, tile_pairs = kDsTileDims / 2;
  for (int t = 0; t < tiles; ++t) {
    qk_segment_bf16<GB, KB, PU>(qp, dim, t * tile_pairs, (t + 1) * tile_pairs, kr, scales + t, tiles, t == 0, s, pf);
  }
  qk_segment_bf16<GB, KB, PU>(qp, dim, latent / 2, (dim + 1) / 2, kr, nullptr, 0, tiles == 0, s, pf);
}

template <int GB, int KB, int PU>
inline void qk_groups_ds(const uint32_t* qp, int latent, int dim, const uint16_t* const* krow, const float* scales,
                         int n, float* s, RowPrefetcher* pf) {
  const int tiles = latent / kDsTileDims;
  int kk = 0;
  for (; kk + KB <= n; kk += KB) {
    qk_block_ds<GB, KB, PU>(qp, latent, dim, krow + kk, scales + size_t(kk) * tiles, s + size_t(kk) * 16, pf);
  }
  for (; kk < n; ++kk) {
    qk_block_ds<GB, 1, PU>(qp, latent, dim, krow + kk, scales + size_t(kk) * tiles, s + size_t(kk) * 16, pf);
  }
}

// qk_tile_bf16 with the per-segment scales (the same register blocks).
void qk_tile_ds(const uint32_t* qp, int groups, int latent, int dim, const uint16_t* const* krow, const float* scales,
                int n, float* s, RowPrefetcher* pf) {
  const size_t group_q = size_t((dim + 1) / 2) * 16;
  int g = 0;
  for (; g + 2 <= groups; g += 2) {
    qk_groups_ds<2, kQkKeys2, kQkUnroll2>(qp + g * group_q, latent, dim, krow, scales, n, s + size_t(g) * kKeyTile * 16,
                                          pf);
  }
  if (g < groups) {
    qk_groups_ds<1, kQkKeys1, kQkUnroll1>(qp + g * group_q, latent, dim, krow, scales, n, s + size_t(g) * kKeyTile * 16,
                                          pf);
  }
}

// P (f32 [G][kKeyTile][16], n keys) times each key's segment-t scale, as bf16
// key pairs p2t [tiles][G][kKeyTile/2][16] (pack_probability_pairs' layout
// per segment).
void pack_scaled_probability_pairs(const float* p, int groups, int n, const float* scales, int tiles, uint32_t* p2t) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  for (int g = 0; g < groups; ++g) {
    const float* pg = p + size_t(g) * kKeyTile * 16;
    for (int i = 0; 2 * i < n; ++i) {
      const __m512 even = _mm512_loadu_ps(pg + size_t(2 * i) * 16);
      const bool has_odd = 2 * i + 1 < n;
      const __m512 odd = has_odd ? _mm512_loadu_ps(pg + size_t(2 * i + 1) * 16) : _mm512_setzero_ps();
      const float* se = scales + size_t(2 * i) * tiles;
      for (int t = 0; t < tiles; ++t) {
        const __m512 e = _mm512_mul_ps(even, _mm512_set1_ps(se[t]));
        const __m512 o = has_odd ? _mm512_mul_ps(odd, _mm512_set1_ps(se[tiles + t])) : odd;
        const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(o, e);
        uint32_t* out = p2t + (size_t(t) * groups + g) * (kKeyTile / 2) * 16;
        _mm512_storeu_si512(out + size_t(i) * 16, _mm512_permutexvar_epi16(idx, both));
      }
    }
  }
}

// Output dims [d0, d1) of GB groups: pv_block_bf16 blocks of DT dims, then 4, then 1.
template <int GB, int DT>
inline void pv_range_bf16(const uint32_t* p2, int pairs, const uint32_t* v2, int64_t v2_stride, int d0, int d1,
                          float* ot, int dv, const float* alpha) {
  int d = d0;
  for (; d + DT <= d1; d += DT) pv_block_bf16<GB, DT>(p2, pairs, v2, v2_stride, d, ot, dv, alpha);
  for (; d + 4 <= d1; d += 4) pv_block_bf16<GB, 4>(p2, pairs, v2, v2_stride, d, ot, dv, alpha);
  for (; d < d1; ++d) pv_block_bf16<GB, 1>(p2, pairs, v2, v2_stride, d, ot, dv, alpha);
}

// pv_tile_bf16 with segment t's dims [128 t, 128 t + 128) taking segment t's
// probability pairs. v2: the tile's raw value pairs [kKeyTile/2][latent].
void pv_tile_ds(const uint32_t* p2t, int groups, int n, const uint32_t* v2, int latent, float* ot, const float* alpha) {
  const int pairs = (n + 1) / 2, tiles = latent / kDsTileDims;
  const size_t group_p = size_t(kKeyTile / 2) * 16;
  for (int t = 0; t < tiles; ++t) {
    const uint32_t* p2 = p2t + size_t(t) * groups * group_p;
    const int d0 = t * kDsTileDims, d1 = d0 + kDsTileDims;
    int g = 0;
    for (; g + 2 <= groups; g += 2) {
      pv_range_bf16<2, kPvDims2>(p2 + g * group_p, pairs, v2, latent, d0, d1, ot + size_t(g) * latent * 16, latent,
                                 alpha + size_t(g) * 16);
    }
    if (g < groups) {
      pv_range_bf16<1, kPvDims1>(p2 + g * group_p, pairs, v2, latent, d0, d1, ot + size_t(g) * latent * 16, latent,
                                 alpha + size_t(g) * 16);
    }
  }
}

// The bf16 path's scratch with one probability-pair buffer (sc.p2) per
// scale tile and the tile's scales.
struct DecodeScratchDs : DecodeScratchBf16 {
  DecodeScratchDs(Arena& a, int groups, int latent, int rope)
      : DecodeScratchBf16(a, groups, latent, rope, latent / kDsTileDims, latent / kDsTileDims) {}
};

size_t decode_scratch_bytes_ds(int lanes, int latent, int rope) {
  return layout_bytes<DecodeScratchDs>(div_up(lanes, 16), latent, rope);
}

// Entries of keys [k0, k0 + n) (n may be <= 0: none).
inline void ds_tile_rows(const DecodeSplitJob& job, int k0, int n, const char** rows) {
  for (int kk = 0; kk < n; ++kk) rows[kk] = static_cast<const char*>(job.cache) + job.entry_offsets[k0 + kk];
}

// The job's keys are fp8_ds_mla entries at job.cache + job.entry_offsets[key]
// (cache_dtype u8, block_table unused); queries bf16.
void decode_split_ds_mla(const DecodeSplitJob& job) {
  const int lanes = job.s_q * job.num_heads, groups = div_up(lanes, 16);
  const int latent = job.kv_lora_rank, rope = job.rope_dim, dim = latent + rope, tiles = latent / kDsTileDims;
  const int entry_lines = div_up(latent + 4 * tiles + 2 * rope, 64);
  Arena arena(job.scratch);
  DecodeScratchDs sc(arena, groups, latent, rope);
  pack_decode_query_pairs(job, groups, sc.qstage, sc.qp);
  const int kmax = decode_lane_ends(job, groups, 16, sc.softmax.lane_end, sc.softmax.group_min_end);
  const int min_end = visible_min_end(sc.softmax.lane_end, groups * 16, job.key_begin);
  init_state<Bf16Isa>(groups, sc.softmax.m, sc.softmax.l, sc.ot, latent);
  const SoftmaxState st = sc.softmax.state();
  const float c = job.scale * kLog2e;
  ds_tile_rows(job, job.key_begin, imin(kKeyTile, kmax - job.key_begin), sc.rows);
  for (int k0 = job.key_begin; k0 < kmax; k0 += kKeyTile) {
    const int n = imin(kKeyTile, kmax - k0);
    // The next tile's entries go to L2 while this tile is computed (RowPrefetcher).
    const int next_n = imax(0, imin(kKeyTile, kmax - k0 - kKeyTile));
    ds_tile_rows(job, k0 + kKeyTile, next_n, sc.next_rows);
    const int64_t lines = int64_t(next_n) * entry_lines, steps = qk_steps_bf16(n, groups, dim);
    RowPrefetcher pf{sc.next_rows, next_n, entry_lines, lines > 0 ? int(imax(1, int(steps / lines))) : 1};
    for (int kk = 0; kk < n; ++kk) {
      uint16_t* dst = sc.keys + size_t(kk) * dim;
      ds_entry_to_bf16(reinterpret_cast<const uint8_t*>(sc.rows[kk]), latent, rope, dst,
                       sc.scales + size_t(kk) * tiles);
      sc.krow[kk] = dst;
    }
    for (int i = 0; 2 * i < n; ++i) {
      Avx512::pack_value_pairs(sc.krow[2 * i], 2 * i + 1 < n ? sc.krow[2 * i + 1] : nullptr, latent,
                               sc.values + size_t(i) * latent);
    }
    qk_tile_ds(sc.qp, groups, latent, dim, sc.krow, sc.scales, n, sc.s, &pf);
    softmax_tile<Bf16Isa>(sc.s, groups, n, k0, c, st);
    pack_scaled_probability_pairs(sc.s, groups, n, sc.scales, tiles, sc.p2);
    const int n_fast = fast_keys(n, min_end - k0);
    pv_tile_ds(sc.p2, groups, n_fast, sc.values, latent, sc.ot, sc.softmax.alpha);
    if (n_fast < n) {
      pv_masked_tail<Bf16Isa>(sc.s, groups, n_fast, n, k0, sc.softmax.lane_end, sc.ot, latent, [&](int kk, int d) {
        return bf16_bits_to_f32(sc.krow[kk][d]) * sc.scales[size_t(kk) * tiles + d / kDsTileDims];
      });
    }
    const char** done = sc.rows;
    sc.rows = sc.next_rows;
    sc.next_rows = done;
  }
  decode_write_partials<Bf16Isa>(job, sc.ot, sc.softmax.m, sc.softmax.l, sc.out_rows, sc.lse);
}

}  // namespace
}  // namespace lattn::cpu
