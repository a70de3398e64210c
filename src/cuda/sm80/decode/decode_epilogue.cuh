// src/cuda/sm80/decode/decode_epilogue.cuh — the end of one pass over a CTA's
// kBlockM rows, shared by the decode kernel and the sparse kernel
// (sm80/sparse/): combine the per-thread row sums, normalize O, and hand each
// output pair and each row's LSE to the caller's store. The decode kernel
// writes either the final output and LSE (request not split) or a partial
// result for decode_combine (request split over several CTAs).
#pragma once

#include <cmath>

#include "cuda/sm80/decode/decode_mainloop.cuh"

namespace lattn::cuda::sm80 {

// O accumulators (phase 2 layout) <- 0, before the first KV tile.
template <class K>
__device__ __forceinline__ void zero_o(float (&o)[K::kMTiles][K::kNTilesO][4]) {
#pragma unroll
  for (int mi = 0; mi < K::kMTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < K::kNTilesO; ++ni) o[mi][ni][0] = o[mi][ni][1] = o[mi][ni][2] = o[mi][ni][3] = 0.f;
}

// The first half of a row sum over the column groups (write_rows and
// decode_split_fold.cuh's fold_split): each warp's quad-reduced row sums
// st.l go to reduce[cg][row] (the main loop's shared-memory scratch,
// kColGroups x kBlockM floats), then a barrier. The second half,
// column_group_sum, runs on the row's owner (column group 0, lane % 4 == 0),
// in the caller's loop: a helper that also owned that loop (a lambda for its
// body, or the owner test and row index returned from here) made ptxas spill
// 4 bytes in the 16-row, 3-stage fp8-cache folding kernel, at 255 registers.
template <class K>
__device__ __forceinline__ void publish_row_sums(const SoftmaxState& st, float* reduce) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rg = warp % K::kRowGroups, cg = warp / K::kRowGroups;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float l = quad_sum(st.l[i]);
    if (lane % 4 == 0) reduce[cg * K::kBlockM + rg * 16 + lane / 4 + 8 * i] = l;
  }
  __syncthreads();
}

// Row `row`'s sum over the column groups, in group order (the fold relies
// on the same order in both callers).
template <class K>
__device__ __forceinline__ float column_group_sum(const float* reduce, int row) {
  float l = 0.f;
#pragma unroll
  for (int g = 0; g < K::kColGroups; ++g) l += reduce[g * K::kBlockM + row];
  return l;
}

// A row's natural-log LSE from its running max m (log2 units) and sum l:
// -inf for a row that saw no key, NaN for a NaN sum.
__device__ __forceinline__ float row_lse(float m, float l) {
  return l == 0.f ? -INFINITY : (m + log2f(l)) * 0.69314718055994531f;
}

// Rows [0, n_rows) of the CTA are written (the rest are padding):
//   1. row sums over all column groups give each row's natural-log LSE and
//      its output factor factor(row, l, lse) (1 / l times what the caller
//      scales by; called for padding rows too); a row that saw no key gets
//      factor 0 and LSE -inf, a NaN row sum (the row attended to a NaN) NaN
//      for both;
//   2. store_row(row, col0, pair) stores this thread's outputs of the row
//      (phase 2 layout: this warp's columns of every row): pair(ni) is the
//      float2 of O[row][col0 + 8 ni, +1] times the factor, ni < kNTilesO
//      (per row, so the caller computes the row's address once);
//   3. store_lse(row, lse), one thread a row.
// `reduce` and `row_vec` are the main loop's shared-memory scratch.
template <class K, class Factor, class StoreRow, class StoreLse>
__device__ __forceinline__ void write_rows(const SoftmaxState& st, const float (&o)[K::kMTiles][K::kNTilesO][4],
                                           int n_rows, float* reduce, float* row_vec, Factor factor, StoreRow store_row,
                                           StoreLse store_lse) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rg = warp % K::kRowGroups, cg = warp / K::kRowGroups;
  publish_row_sums<K>(st, reduce);
  if (cg == 0 && lane % 4 == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = rg * 16 + lane / 4 + 8 * i;
      const float l = column_group_sum<K>(reduce, row), lse = row_lse(st.m[i], l);
      row_vec[row] = l == 0.f ? 0.f : factor(row, l, lse);
      row_vec[K::kBlockM + row] = lse;
    }
  }
  __syncthreads();

  const int col_base = warp * K::kColsPerWarp + (lane % 4) * 2;
#pragma unroll
  for (int mi = 0; mi < K::kMTiles; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = mi * 16 + lane / 4 + 8 * half;
      if (row >= n_rows) continue;
      const float f = row_vec[row];
      store_row(row, col_base,
                [&](int ni) { return make_float2(o[mi][ni][2 * half] * f, o[mi][ni][2 * half + 1] * f); });
    }
  }
  for (int row = threadIdx.x; row < K::kBlockM && row < n_rows; row += K::kThreads) {
    store_lse(row, row_vec[K::kBlockM + row]);
  }
}

// This thread's outputs of row `row` of the CTA (rows [rv.row0, +kBlockM) of
// one request; pair(ni) as write_rows' store_row gets it): slot < 0, the
// final output; else partial O of plan slot `slot`. Shared by the decode
// epilogue and the batch-invariant fold's write (write_folded).
template <class K, class Pair>
__device__ __forceinline__ void store_o_row(const DecodeParams& p, const DecodeRequestView& rv, int slot, int row,
                                            int col0, Pair pair) {
  using T = typename K::T;
  const int gr = rv.row0 + row;
  if (slot < 0) {
    const int j = gr / p.num_heads, h = gr % p.num_heads;
    T* out = static_cast<T*>(p.out) + (rv.q0 + j) * p.out_stride_t + h * p.out_stride_h + col0;
#pragma unroll
    for (int ni = 0; ni < K::kNTilesO; ++ni) {
      const float2 v = pair(ni);
      *reinterpret_cast<uint32_t*>(out + ni * 8) = pack2<T>(v.x, v.y);
    }
  } else {
    float* out = p.plan.partial_o + (int64_t(slot) * p.plan.rows_capacity + gr) * K::kL + col0;
#pragma unroll
    for (int ni = 0; ni < K::kNTilesO; ++ni) *reinterpret_cast<float2*>(out + ni * 8) = pair(ni);
  }
}

// The decode kernel's epilogue for rows [rv.row0, +kBlockM) of one request:
// slot < 0: the final output (times out_scale) and LSE; else the partial O
// and LSE of plan slot `slot`.
template <class K>
__device__ __forceinline__ void write_o(const DecodeParams& p, const DecodeRequestView& rv, const SoftmaxState& st,
                                        const float (&o)[K::kMTiles][K::kNTilesO][4], int slot, float* reduce,
                                        float* row_vec) {
  const auto factor = [&](int, float l, float) { return p.out_scale / l; };
  const auto store_row = [&](int row, int col0, auto pair) { store_o_row<K>(p, rv, slot, row, col0, pair); };
  const auto store_lse = [&](int row, float lse) {
    const int gr = rv.row0 + row;
    if (slot < 0) {
      if (p.lse) {
        const int j = gr / p.num_heads, h = gr % p.num_heads;
        p.lse[h * p.lse_stride_h + int64_t(rv.q0 + j) * p.lse_stride_t] = lse;
      }
    } else {
      p.plan.partial_lse[int64_t(slot) * p.plan.rows_capacity + gr] = lse;
    }
  };
  write_rows<K>(st, o, rv.rows - rv.row0, reduce, row_vec, factor, store_row, store_lse);
}

}  // namespace lattn::cuda::sm80
