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

// Register blocks of the scores: GB groups x KB keys, each sum split into PU
// partial sums over interleaved pairs (added at the end). Splitting the sum
// instead of taking more keys keeps the row pointers few enough to stay in
// general registers (16 keys' pointers do not fit, and reloading them costs
// more than the extra query loads). 16 accumulators either way.
constexpr int kQkKeys1 = 4, kQkUnroll1 = 4;  // one group
constexpr int kQkKeys2 = 4, kQkUnroll2 = 2;  // two groups
// Output blocks: groups x dims, 16 (one group) or 24 (two) accumulators; the
// wider block halves the per-tile rescale loads and stores of the outputs.
constexpr int kPvDims1 = 16, kPvDims2 = 12;

// Scores of GB groups x KB keys over pairs [p0, p1) of the query/key
// dimension (the pair at dim / 2 of an odd dim is (K[dim-1], 0)), times
// key_scale[kk * scale_stride] when key_scale is given, stored into s
// (first) or added to it. qp [G][ceil(dim/2)][16], s [G][kKeyTile][16].
template <int GB, int KB, int PU>
inline void qk_segment_bf16(const uint32_t* qp, int dim, int p0, int p1, const uint16_t* const* krow,
                            const float* key_scale, int scale_stride, bool first, float* s, RowPrefetcher* pf) {
  constexpr int W = 16;
  const int pairs = (dim + 1) / 2, half = dim / 2, full = imin(half, p1);
  __m512 acc[GB][KB][PU];
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g) {
#pragma GCC unroll 32
    for (int kk = 0; kk < KB; ++kk) {
#pragma GCC unroll 8
      for (int u = 0; u < PU; ++u) acc[g][kk][u] = _mm512_setzero_ps();
    }
  }
  const uint16_t* kr[KB];  // the row pointers in general registers
#pragma GCC unroll 32
  for (int kk = 0; kk < KB; ++kk) kr[kk] = krow[kk];
  int p = p0;
  for (; p + PU <= full; p += PU) {
    if (pf) pf->step();
    __m512bh q[GB][PU];
#pragma GCC unroll 8
    for (int g = 0; g < GB; ++g) {
#pragma GCC unroll 8
      for (int u = 0; u < PU; ++u) q[g][u] = load_pairs(qp + (size_t(g) * pairs + p + u) * W);
    }
#pragma GCC unroll 32
    for (int kk = 0; kk < KB; ++kk) {
#pragma GCC unroll 8
      for (int u = 0; u < PU; ++u) {
        const __m512bh b = bcast_pair(kr[kk] + 2 * (p + u));
#pragma GCC unroll 8
        for (int g = 0; g < GB; ++g) acc[g][kk][u] = _mm512_dpbf16_ps(acc[g][kk][u], b, q[g][u]);
      }
    }
  }
  for (; p < p1; ++p) {  // leftover pairs, the odd last element as (K[dim-1], 0)
#pragma GCC unroll 32
    for (int kk = 0; kk < KB; ++kk) {
      const uint32_t bits = p < half ? load_u32(kr[kk] + 2 * p) : uint32_t(kr[kk][dim - 1]);
      const __m512bh b = (__m512bh)_mm512_set1_epi32(int(bits));
#pragma GCC unroll 8
      for (int g = 0; g < GB; ++g) {
        acc[g][kk][0] = _mm512_dpbf16_ps(acc[g][kk][0], b, load_pairs(qp + (size_t(g) * pairs + p) * W));
      }
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g) {
#pragma GCC unroll 32
    for (int kk = 0; kk < KB; ++kk) {
      __m512 sum = acc[g][kk][0];
#pragma GCC unroll 8
      for (int u = 1; u < PU; ++u) sum = _mm512_add_ps(sum, acc[g][kk][u]);
      if (key_scale) sum = _mm512_mul_ps(sum, _mm512_set1_ps(key_scale[kk * scale_stride]));
      float* dst = s + (size_t(g) * kKeyTile + kk) * W;
      _mm512_storeu_ps(dst, first ? sum : _mm512_add_ps(_mm512_loadu_ps(dst), sum));
    }
  }
}

// Scores for GB groups x KB keys over the whole dimension: s = Q . K.
template <int GB, int KB, int PU>
inline void qk_block_bf16(const uint32_t* qp, int dim, const uint16_t* const* krow, float* s, RowPrefetcher* pf) {
  qk_segment_bf16<GB, KB, PU>(qp, dim, 0, (dim + 1) / 2, krow, nullptr, 0, true, s, pf);
}

template <int GB, int KB, int PU>
inline void qk_groups_bf16(const uint32_t* qp, int dim, const uint16_t* const* krow, int n, float* s,
                           RowPrefetcher* pf) {
  int kk = 0;
  for (; kk + KB <= n; kk += KB) qk_block_bf16<GB, KB, PU>(qp, dim, krow + kk, s + size_t(kk) * 16, pf);
  for (; kk < n; ++kk) qk_block_bf16<GB, 1, PU>(qp, dim, krow + kk, s + size_t(kk) * 16, pf);
}

void qk_tile_bf16(const uint32_t* qp, int groups, int dim, const uint16_t* const* krow, int n, float* s,
                  RowPrefetcher* pf = nullptr) {
  const size_t group_q = size_t((dim + 1) / 2) * 16;
  int g = 0;
  for (; g + 2 <= groups; g += 2) {
    qk_groups_bf16<2, kQkKeys2, kQkUnroll2>(qp + g * group_q, dim, krow, n, s + size_t(g) * kKeyTile * 16, pf);
  }
  if (g < groups) {
    qk_groups_bf16<1, kQkKeys1, kQkUnroll1>(qp + g * group_q, dim, krow, n, s + size_t(g) * kKeyTile * 16, pf);
  }
}

// step() calls of one qk_tile_bf16 (for spreading prefetches over it).
inline int64_t qk_steps_bf16(int n, int groups, int dim) {
  const int64_t pair_blocks = groups / 2, single = groups % 2;
  const auto blocks = [n](int kb) { return int64_t(n / kb + n % kb); };
  return pair_blocks * blocks(kQkKeys2) * (dim / 2 / kQkUnroll2) + single * blocks(kQkKeys1) * (dim / 2 / kQkUnroll1);
}

// P of a tile (f32 [G][kKeyTile][16], n keys) as bf16 key pairs
// p2 [G][kKeyTile/2][16]: lane bits = bf16(P[2i]) | bf16(P[2i+1]) << 16.
void pack_probability_pairs(const float* p, int groups, int n, uint32_t* p2) {
  // cvtne2ps gives [P[2i] x16 | P[2i+1] x16]; interleave the halves.
  alignas(64) static constexpr uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
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
inline void pv_block_bf16(const uint32_t* p2, int pairs, const uint32_t* v2, int64_t v2_stride, int d0, float* ot,
                          int dv, const float* alpha) {
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
    const uint32_t* v = v2 + i * v2_stride + d0;
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
inline void pv_groups_bf16(const uint32_t* p2, int pairs, const uint32_t* v2, int64_t v2_stride, float* ot, int dv,
                           const float* alpha) {
  int d = 0;
  for (; d + DT <= dv; d += DT) pv_block_bf16<GB, DT>(p2, pairs, v2, v2_stride, d, ot, dv, alpha);
  for (; d + 4 <= dv; d += 4) pv_block_bf16<GB, 4>(p2, pairs, v2, v2_stride, d, ot, dv, alpha);
  for (; d < dv; ++d) pv_block_bf16<GB, 1>(p2, pairs, v2, v2_stride, d, ot, dv, alpha);
}

// Value pairs of the tile: pair i at v2 + i * v2_stride (uint32 elements).
void pv_tile_bf16(const uint32_t* p2, int groups, int n, const uint32_t* v2, int64_t v2_stride, float* ot, int dv,
                  const float* alpha) {
  const int pairs = (n + 1) / 2;
  int g = 0;
  for (; g + 2 <= groups; g += 2) {
    pv_groups_bf16<2, kPvDims2>(p2 + size_t(g) * (kKeyTile / 2) * 16, pairs, v2, v2_stride, ot + size_t(g) * dv * 16,
                                dv, alpha + size_t(g) * 16);
  }
  if (g < groups) {
    pv_groups_bf16<1, kPvDims1>(p2 + size_t(g) * (kKeyTile / 2) * 16, pairs, v2, v2_stride, ot + size_t(g) * dv * 16,
                                dv, alpha + size_t(g) * 16);
  }
}

// Keys of a tile (n keys, the first `seen_by_all` of them seen by every
// lane) that the paired output product takes: all n when every lane sees
// them, else the even count below seen_by_all (a pair must not hold a masked
// key); pv_masked_tail takes the rest.
inline int fast_keys(int n, int seen_by_all) { return seen_by_all >= n ? n : imax(0, seen_by_all) & ~1; }

inline float bf16_bits_to_f32(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
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
  uint32_t* qp;  // [G][ceil(dqk/2)][16]
  float* s;      // [G][kKeyTile][16]
  uint32_t* p2;  // [G][kKeyTile/2][16]
  float* ot;     // [G][dv][16]
  LaneStates softmax;     // m, l, alpha, lane_end, group_min_end
  float* row;             // [16][dv] a group's output rows
  float* lse;             // [16]
  const uint16_t** krow;  // [kKeyTile]

  PrefillScratchBf16(Arena& a, int groups, int dqk, int dv) {
    qp = a.take<uint32_t>(size_t(groups) * ((dqk + 1) / 2) * 16);
    s = a.take<float>(size_t(groups) * kKeyTile * 16);
    p2 = a.take<uint32_t>(size_t(groups) * (kKeyTile / 2) * 16);
    ot = a.take<float>(size_t(groups) * dv * 16);
    softmax = LaneStates(a, groups, 16);
    row = a.take<float>(size_t(16) * dv);
    lse = a.take<float>(16);
    krow = a.take<const uint16_t*>(kKeyTile);
  }
};

// Bytes of a tile's packed query pairs: [tile_rows / 16][ceil(dqk / 2)][16].
size_t prefill_query_bytes_bf16(int tile_rows, int dqk) {
  return size_t(div_up(tile_rows, 16)) * ((dqk + 1) / 2) * 16 * 4;
}

// pack_prefill_queries of the bf16_dot path (zero lanes past job.rows).
void pack_prefill_query_pairs(const PrefillTileJob& job, uint32_t* qp) {
  const uint16_t* q = static_cast<const uint16_t*>(job.q);
  for (int lane = 0; lane < div_up(job.rows, 16) * 16; ++lane) {
    if (lane < job.rows) {
      pack_query_pairs(q + size_t(lane) * job.q_stride, job.dqk, lane, qp);
    } else {
      zero_query_pairs(job.dqk, lane, qp);
    }
  }
}

size_t prefill_scratch_bytes_bf16(int tile_rows, int dqk, int dv) {
  return layout_bytes<PrefillScratchBf16>(div_up(tile_rows, 16), dqk, dv);
}

void prefill_tile_bf16(const PrefillTileJob& job) {
  const int groups = div_up(job.rows, 16);
  Arena arena(job.scratch);
  PrefillScratchBf16 sc(arena, groups, job.dqk, job.dv);
  const uint32_t* qp = static_cast<const uint32_t*>(job.q_packed);
  if (!qp) {
    pack_prefill_query_pairs(job, sc.qp);
    qp = sc.qp;
  }
  const int kmax = prefill_lane_ends(job, groups, 16, sc.softmax.lane_end, sc.softmax.group_min_end);
  const int min_end = visible_min_end(sc.softmax.lane_end, groups * 16, 0);
  init_state<Bf16Isa>(groups, sc.softmax.m, sc.softmax.l, sc.ot, job.dv);
  const SoftmaxState st = sc.softmax.state();
  const float c = job.scale * kLog2e;
  const uint16_t* k = static_cast<const uint16_t*>(job.k);
  const uint32_t* v = static_cast<const uint32_t*>(job.v);
  for (int k0 = 0; k0 < kmax; k0 += kKeyTile) {  // k0 even: value pairs start at k0 / 2
    const int n = imin(kKeyTile, kmax - k0);
    for (int kk = 0; kk < n; ++kk) sc.krow[kk] = k + size_t(k0 + kk) * job.k_stride;
    qk_tile_bf16(qp, groups, job.dqk, sc.krow, n, sc.s);
    softmax_tile<Bf16Isa>(sc.s, groups, n, k0, c, st);
    pack_probability_pairs(sc.s, groups, n, sc.p2);
    const uint32_t* vt = v + size_t(k0 / 2) * job.v_stride;
    const int n_fast = fast_keys(n, min_end - k0);
    pv_tile_bf16(sc.p2, groups, n_fast, vt, job.v_stride, sc.ot, job.dv, sc.softmax.alpha);
    if (n_fast < n) {
      pv_masked_tail<Bf16Isa>(sc.s, groups, n_fast, n, k0, sc.softmax.lane_end, sc.ot, job.dv, [&](int kk, int d) {
        return bf16_bits_to_f32(uint16_t(vt[size_t(kk / 2) * job.v_stride + d] >> (16 * (kk & 1))));
      });
    }
  }
  prefill_write_rows<Bf16Isa>(job, sc.ot, sc.softmax.m, sc.softmax.l, sc.row, sc.lse);
}

// ---------------------------------------------------------------------------
// Decode, bf16_dot path (bf16 or fp8 cache, bf16 queries). The tile's cache
// rows are read in place (bf16) or converted once to bf16 (fp8, exact), and
// their first L elements are packed into key pairs for the output product.

// p_sets probability-pair buffers (the fp8_ds_mla path packs one per scale
// tile) and scale_tiles scales per key row (fp8_ds_mla; 0 otherwise).
struct DecodeScratchBf16 {
  uint32_t* qp;  // [G][ceil((L+R)/2)][16]
  float* s;      // [G][kKeyTile][16]
  uint32_t* p2;  // [p_sets][G][kKeyTile/2][16]
  float* ot;     // [G][L][16]
  LaneStates softmax;      // m, l, alpha, lane_end, group_min_end
  uint32_t* qstage;        // [16][round_up(ceil((L+R)/2), 16)] a group's query rows as pairs, before the transpose
  float* out_rows;         // [16][L] a group's output rows
  float* lse;              // [16]
  uint16_t* keys;          // [kKeyTile][L+R] fp8 cache rows converted to bf16 (fp8_ds_mla: latent unscaled)
  float* scales;           // [kKeyTile][scale_tiles]
  uint32_t* values;        // [kKeyTile/2][L] key pairs of the tile's latent rows
  const uint16_t** krow;   // [kKeyTile]
  const char** rows;       // [kKeyTile] this tile's cache rows
  const char** next_rows;  // [kKeyTile] the next tile's, being prefetched

  DecodeScratchBf16(Arena& a, int groups, int latent, int rope, int p_sets = 1, int scale_tiles = 0) {
    const int dim = latent + rope;
    qp = a.take<uint32_t>(size_t(groups) * ((dim + 1) / 2) * 16);
    s = a.take<float>(size_t(groups) * kKeyTile * 16);
    p2 = a.take<uint32_t>(size_t(p_sets) * groups * (kKeyTile / 2) * 16);
    ot = a.take<float>(size_t(groups) * latent * 16);
    softmax = LaneStates(a, groups, 16);
    qstage = a.take<uint32_t>(size_t(16) * div_up((dim + 1) / 2, 16) * 16);
    out_rows = a.take<float>(size_t(16) * latent);
    lse = a.take<float>(16);
    keys = a.take<uint16_t>(size_t(kKeyTile) * dim);
    scales = scale_tiles > 0 ? a.take<float>(size_t(kKeyTile) * scale_tiles) : nullptr;
    values = a.take<uint32_t>(size_t(kKeyTile / 2) * latent);
    krow = a.take<const uint16_t*>(kKeyTile);
    rows = a.take<const char*>(kKeyTile);
    next_rows = a.take<const char*>(kKeyTile);
  }
};

size_t decode_scratch_bytes_bf16(int lanes, int latent, int rope) {
  return layout_bytes<DecodeScratchBf16>(div_up(lanes, 16), latent, rope);
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

// The job's query rows [ql_nope | q_pe] as pairs qp [G][ceil((L+R)/2)][16]
// (lanes past the request zero), the same bits pack_query_pairs gives: a
// group's rows are copied as rows of pairs into `stage` (zero past L+R),
// then transposed 16 x 16 at a time (one scattered 4-byte store per pair
// cost several times more).
void pack_decode_query_pairs(const DecodeSplitJob& job, int groups, uint32_t* stage, uint32_t* qp) {
  const int lanes = job.s_q * job.num_heads, latent = job.kv_lora_rank, dim = latent + job.rope_dim;
  const int pairs = (dim + 1) / 2, stride = div_up(pairs, 16) * 16;
  for (int g = 0; g < groups; ++g) {
    for (int i = 0; i < 16; ++i) {
      const int lane = g * 16 + i;
      uint16_t* dst = reinterpret_cast<uint16_t*>(stage + size_t(i) * stride);
      int filled = 0;
      if (lane < lanes) {
        const int j = lane / job.num_heads, h = lane % job.num_heads;
        const uint16_t* qn = static_cast<const uint16_t*>(job.ql_nope) + j * job.ql_stride_t + h * job.ql_stride_h;
        const uint16_t* qe = static_cast<const uint16_t*>(job.q_pe) + j * job.qpe_stride_t + h * job.qpe_stride_h;
        __builtin_memcpy(dst, qn, size_t(latent) * 2);
        __builtin_memcpy(dst + latent, qe, size_t(job.rope_dim) * 2);
        filled = dim;
      }
      __builtin_memset(dst + filled, 0, size_t(2 * stride - filled) * 2);
    }
    uint32_t* out = qp + size_t(g) * pairs * 16;
    int p = 0;
    for (; p + 16 <= pairs; p += 16) {
      Avx512::transpose(reinterpret_cast<const float*>(stage + p), stride,
                        reinterpret_cast<float*>(out + size_t(p) * 16), 16);
    }
    if (p < pairs) {  // the last, partial block of pairs
      alignas(64) float block[16 * 16];
      Avx512::transpose(reinterpret_cast<const float*>(stage + p), stride, block, 16);
      __builtin_memcpy(out + size_t(p) * 16, block, size_t(pairs - p) * 16 * 4);
    }
  }
}

void decode_split_bf16(const DecodeSplitJob& job) {
  const int lanes = job.s_q * job.num_heads;
  const int groups = div_up(lanes, 16);
  const int latent = job.kv_lora_rank, dim = job.kv_lora_rank + job.rope_dim;
  Arena arena(job.scratch);
  DecodeScratchBf16 sc(arena, groups, latent, job.rope_dim);
  pack_decode_query_pairs(job, groups, sc.qstage, sc.qp);
  const int kmax = decode_lane_ends(job, groups, 16, sc.softmax.lane_end, sc.softmax.group_min_end);
  const int min_end = visible_min_end(sc.softmax.lane_end, groups * 16, job.key_begin);
  init_state<Bf16Isa>(groups, sc.softmax.m, sc.softmax.l, sc.ot, latent);
  const SoftmaxState st = sc.softmax.state();
  const float c = job.scale * job.cache_scale * kLog2e;
  const bool fp8 = job.cache_dtype == DType::fp8_e4m3;
  tile_rows(job, job.key_begin, imin(kKeyTile, kmax - job.key_begin), sc.rows);
  for (int k0 = job.key_begin; k0 < kmax; k0 += kKeyTile) {
    const int n = imin(kKeyTile, kmax - k0);
    RowPrefetcher pf = next_tile_prefetcher(job, k0, kmax, qk_steps_bf16(n, groups, dim), sc.next_rows);
    for (int kk = 0; kk < n; ++kk) {
      const char* row = sc.rows[kk];
      if (fp8) {
        uint16_t* dst = sc.keys + size_t(kk) * dim;
        fp8_row_to_bf16(reinterpret_cast<const uint8_t*>(row), dim, dst);
        sc.krow[kk] = dst;
      } else {
        sc.krow[kk] = reinterpret_cast<const uint16_t*>(row);
      }
    }
    for (int i = 0; 2 * i < n; ++i) {
      Avx512::pack_value_pairs(sc.krow[2 * i], 2 * i + 1 < n ? sc.krow[2 * i + 1] : nullptr, latent,
                               sc.values + size_t(i) * latent);
    }
    qk_tile_bf16(sc.qp, groups, dim, sc.krow, n, sc.s, &pf);
    softmax_tile<Bf16Isa>(sc.s, groups, n, k0, c, st);
    pack_probability_pairs(sc.s, groups, n, sc.p2);
    const int n_fast = fast_keys(n, min_end - k0);
    pv_tile_bf16(sc.p2, groups, n_fast, sc.values, latent, sc.ot, latent, sc.softmax.alpha);
    if (n_fast < n) {
      pv_masked_tail<Bf16Isa>(sc.s, groups, n_fast, n, k0, sc.softmax.lane_end, sc.ot, latent,
                              [&](int kk, int d) { return bf16_bits_to_f32(sc.krow[kk][d]); });
    }
    const char** done = sc.rows;
    sc.rows = sc.next_rows;
    sc.next_rows = done;
  }
  decode_write_partials<Bf16Isa>(job, sc.ot, sc.softmax.m, sc.softmax.l, sc.out_rows, sc.lse);
}

}  // namespace
}  // namespace lattn::cpu
