// src/cpu/attention_prefill_tile.h — one prefill tile of the `cpu` backend's
// f32 FMA path (internal): a tile of query rows against its keys, causal or
// not, with the output rows and LSE written. Include only from
// kernels_<isa>.cpp files, through attention_kernels_impl.h (internal linkage:
// see attention_tile_primitives.h).
#pragma once

#include "cpu/attention_tile_primitives.h"

namespace lattn::cpu {
namespace {

// Prefill, f32 FMA path.

struct PrefillScratchF32 {
  float* qt;               // [G][dqk][W]
  float* s;                // [G][kKeyTile][W]
  float* ot;               // [G][dv][W]
  LaneStates softmax;      // m, l, alpha, lane_end, group_min_end
  float* row;              // [W][max(dqk, dv)]: a query row, or a group's output rows
  float* lse;              // [W]
  const float** krow;      // [kKeyTile]
  const float** vrow;      // [kKeyTile]

  PrefillScratchF32(Arena& a, int groups, int w, int dqk, int dv) {
    qt = a.take<float>(size_t(groups) * dqk * w);
    s = a.take<float>(size_t(groups) * kKeyTile * w);
    ot = a.take<float>(size_t(groups) * dv * w);
    softmax = LaneStates(a, groups, w);
    row = a.take<float>(size_t(w) * imax(dqk, dv));
    lse = a.take<float>(size_t(w));
    krow = a.take<const float*>(kKeyTile);
    vrow = a.take<const float*>(kKeyTile);
  }
};

// Query rows of a prefill tile, transposed to [G][dim][W] f32 (zero lanes past `rows`).
// Bytes of a tile's packed f32 queries: [tile_rows / W][dqk][W].
template <class I>
size_t prefill_query_bytes_f32(int tile_rows, int dqk) {
  return size_t(div_up(tile_rows, I::W)) * dqk * I::W * 4;
}

template <class I>
void pack_queries_f32(const PrefillTileJob& job, int groups, float* row, float* qt) {
  constexpr int W = I::W;
  const size_t esize = job.q_dtype == DType::f32 ? 4 : 2;
  for (int lane = 0; lane < groups * W; ++lane) {
    const int g = lane / W, i = lane % W;
    if (lane < job.rows) {
      I::to_f32(static_cast<const char*>(job.q) + size_t(lane) * job.q_stride * esize, job.q_dtype, job.dqk, row);
    } else {
      for (int d = 0; d < job.dqk; ++d) row[d] = 0.f;
    }
    float* dst = qt + size_t(g) * job.dqk * W + i;
    for (int d = 0; d < job.dqk; ++d) dst[size_t(d) * W] = row[d];
  }
}

// f32 -> fp8 e4m3 (OCP "e4m3fn"): round to nearest even, saturating at
// +-448, NaN kept; the same results as lattn::f32_to_fp8e4m3, which this
// file may not call (see the top of the file).
inline uint8_t encode_fp8_e4m3(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);   // NaN
  if (a >= 0x43e80000u) return uint8_t(sign | 0x7eu);  // >= 464 or inf: 448
  if (a < 0x3c800000u) {                               // below 2^-6: subnormal steps of 2^-9
    float mag;
    __builtin_memcpy(&mag, &a, 4);
    return uint8_t(sign | uint8_t(__builtin_nearbyint(double(mag) * 512.0)));
  }
  const uint32_t rounded = a + 0x7ffffu + ((a >> 20) & 1u);
  uint32_t bits = (rounded - 0x3c000000u) >> 20;
  if (bits > 0x7eu) bits = 0x7eu;
  return uint8_t(sign | bits);
}

// The tile's output rows (and LSEs) from the accumulators; rows [W][dv] and
// lse [W] are scratch.
template <class I>
void prefill_write_rows(const PrefillTileJob& job, float* ot, const float* m, const float* l, float* rows, float* lse) {
  constexpr int W = I::W;
  const size_t esize = dtype_bytes(job.out_dtype);
  for (int g = 0; g * W < job.rows; ++g) {
    finalize_group<I>(ot, m, l, g, job.dv, 1.f, rows, lse);
    for (int i = 0; i < W && g * W + i < job.rows; ++i) {
      const int lane = g * W + i;
      const float* row = rows + size_t(i) * job.dv;
      char* dst = static_cast<char*>(job.out) + size_t(lane) * job.out_stride * esize;
      if (job.out_dtype == DType::fp8_e4m3) {
        for (int d = 0; d < job.dv; ++d) reinterpret_cast<uint8_t*>(dst)[d] = encode_fp8_e4m3(row[d] / job.out_scale);
      } else {
        I::from_f32(row, job.dv, job.out_dtype, dst);
      }
      if (job.lse) job.lse[size_t(lane) * job.lse_stride] = lse[i];
    }
  }
}

// Lane ends of a prefill tile: causal rows see their own prefix, others all keys.
inline int prefill_lane_ends(const PrefillTileJob& job, int groups, int w, int32_t* lane_end, int32_t* group_min_end) {
  for (int lane = 0; lane < groups * w; ++lane) {
    int end = 0;
    if (lane < job.rows) end = job.causal ? imin(job.first_row + lane + 1, job.num_keys) : job.num_keys;
    lane_end[lane] = end;
  }
  return finish_lane_ends(lane_end, groups, w, group_min_end);
}

// pack_prefill_queries of the f32 path: the tile's groups, zero lanes past
// job.rows, at dst; job.scratch holds the conversion row.
template <class I>
void pack_prefill_queries_f32(const PrefillTileJob& job, void* dst) {
  pack_queries_f32<I>(job, div_up(job.rows, I::W), static_cast<float*>(job.scratch), static_cast<float*>(dst));
}

template <class I>
size_t prefill_scratch_bytes_f32(int tile_rows, int dqk, int dv) {
  return layout_bytes<PrefillScratchF32>(div_up(tile_rows, I::W), I::W, dqk, dv);
}

template <class I>
void prefill_tile_f32(const PrefillTileJob& job) {
  constexpr int W = I::W;
  const int groups = div_up(job.rows, W);
  Arena arena(job.scratch);
  PrefillScratchF32 sc(arena, groups, W, job.dqk, job.dv);
  const float* qt = static_cast<const float*>(job.q_packed);
  if (!qt) {
    pack_queries_f32<I>(job, groups, sc.row, sc.qt);
    qt = sc.qt;
  }
  const int kmax = prefill_lane_ends(job, groups, W, sc.softmax.lane_end, sc.softmax.group_min_end);
  const int min_end = visible_min_end(sc.softmax.lane_end, groups * W, 0);
  init_state<I>(groups, sc.softmax.m, sc.softmax.l, sc.ot, job.dv);
  const SoftmaxState st = sc.softmax.state();
  const float c = job.scale * kLog2e;
  const float* k = static_cast<const float*>(job.k);
  const float* v = static_cast<const float*>(job.v);
  for (int k0 = 0; k0 < kmax; k0 += kKeyTile) {
    const int n = imin(kKeyTile, kmax - k0);
    for (int kk = 0; kk < n; ++kk) {
      sc.krow[kk] = k + size_t(k0 + kk) * job.k_stride;
      sc.vrow[kk] = v + size_t(k0 + kk) * job.v_stride;
    }
    qk_tile_f32<I>(qt, groups, job.dqk, sc.krow, n, sc.s);
    softmax_tile<I>(sc.s, groups, n, k0, c, st);
    const int n_all = imax(0, imin(n, min_end - k0));  // keys every lane sees
    pv_tile_f32<I>(sc.s, groups, n_all, sc.vrow, sc.ot, job.dv, sc.softmax.alpha);
    if (n_all < n) {
      pv_masked_tail<I>(sc.s, groups, n_all, n, k0, sc.softmax.lane_end, sc.ot, job.dv,
                        [&](int kk, int d) { return sc.vrow[kk][d]; });
    }
  }
  prefill_write_rows<I>(job, sc.ot, sc.softmax.m, sc.softmax.l, sc.row, sc.lse);
}

}  // namespace
}  // namespace lattn::cpu
