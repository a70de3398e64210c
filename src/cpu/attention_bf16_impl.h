// src/cpu/attention_bf16_impl.h — the bf16_dot path of the CPU attention
// kernels: bf16 operands multiplied in pairs by vdpbf16ps (AVX512-BF16), f32
// accumulation. Include only from kernels_avx512.cpp, after isa_avx512.h and
// attention_kernels_impl.h (internal linkage, as those).
//
// vdpbf16ps acc, a, b adds a.lo*b.lo + a.hi*b.hi to each f32 lane, where
// lo/hi are the two bf16 halves of the lane's 32 bits. Both products run
// over a pair of the reduction dimension:
//   scores  S[key] += bcast(K[key][2p], K[key][2p+1]) . (Q[lane][2p], Q[lane][2p+1])
//           (queries packed as pairs: qp [G][ceil(dim/2)][16] uint32)
//   output  OT[d]  += bcast(V[2i][d], V[2i+1][d]) . (P[lane][2i], P[lane][2i+1])
//           (values packed as key pairs, probabilities rounded to bf16 pairs)
// which is twice the f32 FMA rate. The softmax itself stays f32.
#pragma once

#include "cpu/simd_intrinsics.h"

#include <cstdint>

#include "cpu/attention_kernels_impl.h"
#include "cpu/isa_avx512.h"

namespace lattn::cpu {
namespace {

using Bf16Isa = Avx512;

inline __m512bh bcast_pair(const uint16_t* p) { return (__m512bh)_mm512_set1_epi32(int(load_u32(p))); }
inline __m512bh bcast_pair(const uint32_t* p) { return (__m512bh)_mm512_set1_epi32(int(*p)); }
inline __m512bh load_pairs(const uint32_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

// Scores for GB groups x KB keys. dim may be odd: the last pair is then
// (K[dim-1], 0), read without touching the element past the row.
template <int GB, int KB>
inline void qk_block_bf16(const uint32_t* qp, int dim, const uint16_t* const* krow, float* s) {
  constexpr int W = 16;
  const int pairs = (dim + 1) / 2, full = dim / 2;
  __m512 acc[GB][KB];
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g) {
#pragma GCC unroll 32
    for (int kk = 0; kk < KB; ++kk) acc[g][kk] = _mm512_setzero_ps();
  }
  const uint16_t* kr[KB];
#pragma GCC unroll 32
  for (int kk = 0; kk < KB; ++kk) kr[kk] = krow[kk];
  for (int p = 0; p < full; ++p) {
    __m512bh q[GB];
#pragma GCC unroll 8
    for (int g = 0; g < GB; ++g) q[g] = load_pairs(qp + (size_t(g) * pairs + p) * W);
#pragma GCC unroll 32
    for (int kk = 0; kk < KB; ++kk) {
      const __m512bh b = bcast_pair(kr[kk] + 2 * p);
#pragma GCC unroll 8
      for (int g = 0; g < GB; ++g) acc[g][kk] = _mm512_dpbf16_ps(acc[g][kk], b, q[g]);
    }
  }
  if (full < pairs) {
#pragma GCC unroll 32
    for (int kk = 0; kk < KB; ++kk) {
      const __m512bh b = (__m512bh)_mm512_set1_epi32(int(kr[kk][dim - 1]));
#pragma GCC unroll 8
      for (int g = 0; g < GB; ++g) {
        acc[g][kk] = _mm512_dpbf16_ps(acc[g][kk], b, load_pairs(qp + (size_t(g) * pairs + full) * W));
      }
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g) {
#pragma GCC unroll 32
    for (int kk = 0; kk < KB; ++kk) _mm512_storeu_ps(s + (size_t(g) * kKeyTile + kk) * W, acc[g][kk]);
  }
}

template <int GB, int KB>
inline void qk_groups_bf16(const uint32_t* qp, int dim, const uint16_t* const* krow, int n, float* s) {
  int kk = 0;
  for (; kk + KB <= n; kk += KB) qk_block_bf16<GB, KB>(qp, dim, krow + kk, s + size_t(kk) * 16);
  for (; kk < n; ++kk) qk_block_bf16<GB, 1>(qp, dim, krow + kk, s + size_t(kk) * 16);
}

void qk_tile_bf16(const uint32_t* qp, int groups, int dim, const uint16_t* const* krow, int n, float* s) {
  const size_t group_q = size_t((dim + 1) / 2) * 16;
  int g = 0;
  for (; g + 2 <= groups; g += 2) {
    qk_groups_bf16<2, Bf16Isa::kQkKeys2>(qp + g * group_q, dim, krow, n, s + size_t(g) * kKeyTile * 16);
  }
  if (g < groups) qk_groups_bf16<1, Bf16Isa::kQkKeys1>(qp + g * group_q, dim, krow, n, s + size_t(g) * kKeyTile * 16);
}

// P of a tile (f32 [G][kKeyTile][16], n keys) as bf16 key pairs
// p2 [G][kKeyTile/2][16]: lane bits = bf16(P[2i]) | bf16(P[2i+1]) << 16.
void pack_probability_pairs(const float* p, int groups, int n, uint32_t* p2) {
  // cvtne2ps gives [P[2i] x16 | P[2i+1] x16]; interleave the halves.
  alignas(64) static constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                           8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  for (int g = 0; g < groups; ++g) {
    const float* pg = p + size_t(g) * kKeyTile * 16;
    uint32_t* out = p2 + size_t(g) * (kKeyTile / 2) * 16;
    for (int i = 0; 2 * i < n; ++i) {
      const __m512 even = _mm512_loadu_ps(pg + size_t(2 * i) * 16);
      const __m512 odd = 2 * i + 1 < n ? _mm512_loadu_ps(pg + size_t(2 * i + 1) * 16) : _mm512_setzero_ps();
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(odd, even);
      _mm512_storeu_si512(out + size_t(i) * 16, _mm512_permutexvar_epi16(idx, both));
    }
  }
}

template <int GB, int DT>
inline void pv_block_bf16(const uint32_t* p2, int pairs, const uint32_t* const* vrow, int d0, float* ot, int dv,
                          const float* alpha) {
  constexpr int W = 16;
  __m512 acc[GB][DT];
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g) {
    const __m512 a = _mm512_loadu_ps(alpha + size_t(g) * W);
#pragma GCC unroll 32
    for (int dt = 0; dt < DT; ++dt) acc[g][dt] = _mm512_mul_ps(_mm512_loadu_ps(ot + (size_t(g) * dv + d0 + dt) * W), a);
  }
  for (int i = 0; i < pairs; ++i) {
    __m512bh pk[GB];
#pragma GCC unroll 8
    for (int g = 0; g < GB; ++g) pk[g] = load_pairs(p2 + (size_t(g) * (kKeyTile / 2) + i) * W);
    const uint32_t* v = vrow[i] + d0;
#pragma GCC unroll 32
    for (int dt = 0; dt < DT; ++dt) {
      const __m512bh b = bcast_pair(v + dt);
#pragma GCC unroll 8
      for (int g = 0; g < GB; ++g) acc[g][dt] = _mm512_dpbf16_ps(acc[g][dt], b, pk[g]);
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g) {
#pragma GCC unroll 32
    for (int dt = 0; dt < DT; ++dt) _mm512_storeu_ps(ot + (size_t(g) * dv + d0 + dt) * W, acc[g][dt]);
  }
}

template <int GB, int DT>
inline void pv_groups_bf16(const uint32_t* p2, int pairs, const uint32_t* const* vrow, float* ot, int dv,
                           const float* alpha) {
  int d = 0;
  for (; d + DT <= dv; d += DT) pv_block_bf16<GB, DT>(p2, pairs, vrow, d, ot, dv, alpha);
  for (; d < dv; ++d) pv_block_bf16<GB, 1>(p2, pairs, vrow, d, ot, dv, alpha);
}

void pv_tile_bf16(const uint32_t* p2, int groups, int n, const uint32_t* const* vrow, float* ot, int dv,
                  const float* alpha) {
  const int pairs = (n + 1) / 2;
  int g = 0;
  for (; g + 2 <= groups; g += 2) {
    pv_groups_bf16<2, Bf16Isa::kPvDims2>(p2 + size_t(g) * (kKeyTile / 2) * 16, pairs, vrow,
                                         ot + size_t(g) * dv * 16, dv, alpha + size_t(g) * 16);
  }
  if (g < groups) {
    pv_groups_bf16<1, Bf16Isa::kPvDims1>(p2 + size_t(g) * (kKeyTile / 2) * 16, pairs, vrow,
                                         ot + size_t(g) * dv * 16, dv, alpha + size_t(g) * 16);
  }
}

// Lane `lane`'s query (dim bf16 values at row) into the pair layout qp [G][ceil(dim/2)][16].
inline void pack_query_pairs(const uint16_t* row, int dim, int lane, uint32_t* qp) {
  const int pairs = (dim + 1) / 2;
  uint32_t* dst = qp + size_t(lane / 16) * pairs * 16 + lane % 16;
  for (int p = 0; p < pairs; ++p) {
    const uint32_t hi = 2 * p + 1 < dim ? uint32_t(row[2 * p + 1]) : 0u;
    dst[size_t(p) * 16] = uint32_t(row[2 * p]) | hi << 16;
  }
}

inline void zero_query_pairs(int dim, int lane, uint32_t* qp) {
  const int pairs = (dim + 1) / 2;
  uint32_t* dst = qp + size_t(lane / 16) * pairs * 16 + lane % 16;
  for (int p = 0; p < pairs; ++p) dst[size_t(p) * 16] = 0u;
}

// ---------------------------------------------------------------------------
// Prefill, bf16_dot path.

struct PrefillScratchBf16 {
  uint32_t* qp;     // [G][ceil(dqk/2)][16]
  float* s;         // [G][kKeyTile][16]
  uint32_t* p2;     // [G][kKeyTile/2][16]
  float* ot;        // [G][dv][16]
  float *m, *l, *alpha;
  int32_t* lane_end;
  int32_t* group_min_end;
  float* row;       // [dv]
  const uint16_t** krow;  // [kKeyTile]
  const uint32_t** vrow;  // [kKeyTile/2]

  PrefillScratchBf16(Arena& a, int groups, int dqk, int dv) {
    qp = a.take<uint32_t>(size_t(groups) * ((dqk + 1) / 2) * 16);
    s = a.take<float>(size_t(groups) * kKeyTile * 16);
    p2 = a.take<uint32_t>(size_t(groups) * (kKeyTile / 2) * 16);
    ot = a.take<float>(size_t(groups) * dv * 16);
    m = a.take<float>(size_t(groups) * 16);
    l = a.take<float>(size_t(groups) * 16);
    alpha = a.take<float>(size_t(groups) * 16);
    lane_end = a.take<int32_t>(size_t(groups) * 16);
    group_min_end = a.take<int32_t>(size_t(groups));
    row = a.take<float>(size_t(dv));
    krow = a.take<const uint16_t*>(kKeyTile);
    vrow = a.take<const uint32_t*>(kKeyTile / 2);
  }
};

size_t prefill_scratch_bytes_bf16(int tile_rows, int dqk, int dv) {
  Arena a(nullptr);
  PrefillScratchBf16 layout(a, div_up(tile_rows, 16), dqk, dv);
  return a.used();
}

void prefill_tile_bf16(const PrefillTileJob& job) {
  const int groups = div_up(job.rows, 16);
  Arena arena(job.scratch);
  PrefillScratchBf16 sc(arena, groups, job.dqk, job.dv);
  const uint16_t* q = static_cast<const uint16_t*>(job.q);
  for (int lane = 0; lane < groups * 16; ++lane) {
    if (lane < job.rows) {
      pack_query_pairs(q + size_t(lane) * job.q_stride, job.dqk, lane, sc.qp);
    } else {
      zero_query_pairs(job.dqk, lane, sc.qp);
    }
  }
  const int kmax = prefill_lane_ends(job, groups, 16, sc.lane_end, sc.group_min_end);
  init_state<Bf16Isa>(groups, sc.m, sc.l, sc.ot, job.dv);
  const SoftmaxState st{sc.m, sc.l, sc.alpha, sc.lane_end, sc.group_min_end};
  const float c = job.scale * kLog2e;
  const uint16_t* k = static_cast<const uint16_t*>(job.k);
  const uint32_t* v = static_cast<const uint32_t*>(job.v);
  for (int k0 = 0; k0 < kmax; k0 += kKeyTile) {  // k0 even: value pairs start at k0 / 2
    const int n = imin(kKeyTile, kmax - k0);
    for (int kk = 0; kk < n; ++kk) sc.krow[kk] = k + size_t(k0 + kk) * job.k_stride;
    for (int i = 0; 2 * i < n; ++i) sc.vrow[i] = v + size_t(k0 / 2 + i) * job.v_stride;
    qk_tile_bf16(sc.qp, groups, job.dqk, sc.krow, n, sc.s);
    softmax_tile<Bf16Isa>(sc.s, groups, n, k0, c, st);
    pack_probability_pairs(sc.s, groups, n, sc.p2);
    pv_tile_bf16(sc.p2, groups, n, sc.vrow, sc.ot, job.dv, sc.alpha);
  }
  prefill_write_rows<Bf16Isa>(job, sc.ot, sc.m, sc.l, sc.row);
}

// ---------------------------------------------------------------------------
// Decode, bf16_dot path (bf16 or fp8 cache, bf16 queries). The tile's cache
// rows are read in place (bf16) or converted once to bf16 (fp8, exact), and
// their first L elements are packed into key pairs for the output product.

struct DecodeScratchBf16 {
  uint32_t* qp;     // [G][ceil((L+R)/2)][16]
  float* s;         // [G][kKeyTile][16]
  uint32_t* p2;     // [G][kKeyTile/2][16]
  float* ot;        // [G][L][16]
  float *m, *l, *alpha;
  int32_t* lane_end;
  int32_t* group_min_end;
  uint16_t* qrow;   // [L+R] one query row, bf16
  uint16_t* keys;   // [kKeyTile][L+R] fp8 cache rows converted to bf16
  uint32_t* values; // [kKeyTile/2][L] key pairs of the tile's latent rows
  const uint16_t** krow;  // [kKeyTile]
  const uint32_t** vrow;  // [kKeyTile/2]

  DecodeScratchBf16(Arena& a, int groups, int latent, int rope) {
    const int dim = latent + rope;
    qp = a.take<uint32_t>(size_t(groups) * ((dim + 1) / 2) * 16);
    s = a.take<float>(size_t(groups) * kKeyTile * 16);
    p2 = a.take<uint32_t>(size_t(groups) * (kKeyTile / 2) * 16);
    ot = a.take<float>(size_t(groups) * latent * 16);
    m = a.take<float>(size_t(groups) * 16);
    l = a.take<float>(size_t(groups) * 16);
    alpha = a.take<float>(size_t(groups) * 16);
    lane_end = a.take<int32_t>(size_t(groups) * 16);
    group_min_end = a.take<int32_t>(size_t(groups));
    qrow = a.take<uint16_t>(size_t(dim));
    keys = a.take<uint16_t>(size_t(kKeyTile) * dim);
    values = a.take<uint32_t>(size_t(kKeyTile / 2) * latent);
    krow = a.take<const uint16_t*>(kKeyTile);
    vrow = a.take<const uint32_t*>(kKeyTile / 2);
  }
};

size_t decode_scratch_bytes_bf16(int lanes, int latent, int rope) {
  Arena a(nullptr);
  DecodeScratchBf16 layout(a, div_up(lanes, 16), latent, rope);
  return a.used();
}

// fp8 e4m3 row -> bf16 bits (exact: 3 mantissa bits fit in bf16's 7).
inline void fp8_row_to_bf16(const uint8_t* src, int n, uint16_t* dst) {
  int i = 0;
  for (; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 f = Avx512::fp8x16_to_f32(_mm_maskz_loadu_epi8(k, src + i));
    _mm256_mask_storeu_epi16(dst + i, k, _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16)));
  }
}

void decode_split_bf16(const DecodeSplitJob& job) {
  const int lanes = job.s_q * job.num_heads;
  const int groups = div_up(lanes, 16);
  const int latent = job.kv_lora_rank, dim = job.kv_lora_rank + job.rope_dim;
  Arena arena(job.scratch);
  DecodeScratchBf16 sc(arena, groups, latent, job.rope_dim);
  for (int lane = 0; lane < groups * 16; ++lane) {
    if (lane >= lanes) {
      zero_query_pairs(dim, lane, sc.qp);
      continue;
    }
    const int j = lane / job.num_heads, h = lane % job.num_heads;
    const uint16_t* qn = static_cast<const uint16_t*>(job.ql_nope) + j * job.ql_stride_t + h * job.ql_stride_h;
    const uint16_t* qe = static_cast<const uint16_t*>(job.q_pe) + j * job.qpe_stride_t + h * job.qpe_stride_h;
    __builtin_memcpy(sc.qrow, qn, size_t(latent) * 2);
    __builtin_memcpy(sc.qrow + latent, qe, size_t(job.rope_dim) * 2);
    pack_query_pairs(sc.qrow, dim, lane, sc.qp);
  }
  const int kmax = decode_lane_ends(job, groups, 16, sc.lane_end, sc.group_min_end);
  init_state<Bf16Isa>(groups, sc.m, sc.l, sc.ot, latent);
  const SoftmaxState st{sc.m, sc.l, sc.alpha, sc.lane_end, sc.group_min_end};
  const float c = job.scale * job.cache_scale * kLog2e;
  const bool fp8 = job.cache_dtype == DType::fp8_e4m3;
  for (int k0 = job.key_begin; k0 < kmax; k0 += kKeyTile) {
    const int n = imin(kKeyTile, kmax - k0);
    for (int kk = 0; kk < n; ++kk) {
      const char* row = cache_row(job, k0 + kk);
      if (fp8) {
        uint16_t* dst = sc.keys + size_t(kk) * dim;
        fp8_row_to_bf16(reinterpret_cast<const uint8_t*>(row), dim, dst);
        sc.krow[kk] = dst;
      } else {
        sc.krow[kk] = reinterpret_cast<const uint16_t*>(row);
      }
    }
    for (int i = 0; 2 * i < n; ++i) {
      uint32_t* dst = sc.values + size_t(i) * latent;
      Avx512::pack_value_pairs(sc.krow[2 * i], 2 * i + 1 < n ? sc.krow[2 * i + 1] : nullptr, latent, dst);
      sc.vrow[i] = dst;
    }
    qk_tile_bf16(sc.qp, groups, dim, sc.krow, n, sc.s);
    softmax_tile<Bf16Isa>(sc.s, groups, n, k0, c, st);
    pack_probability_pairs(sc.s, groups, n, sc.p2);
    pv_tile_bf16(sc.p2, groups, n, sc.vrow, sc.ot, latent, sc.alpha);
  }
  decode_write_partials(job, sc.ot, sc.m, sc.l, 16);
}

}  // namespace
}  // namespace lattn::cpu
