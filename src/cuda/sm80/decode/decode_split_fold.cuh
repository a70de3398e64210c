// src/cuda/sm80/decode/decode_split_fold.cuh — the decode kernel's side of
// the batch-invariant left fold (smxx/decode_fold.cuh): a CTA that walks
// several splits of one request starting at its first split folds each
// finished split into f32 accumulators (in a scratch row block of its own)
// instead of writing it out, with the combine kernel's per-output arithmetic, so that a request
// walked by one CTA (large batches: no partials at all) gets the bits it gets
// when its splits run on many CTAs and the combine folds their partials
// (small batches). 16-row tiles only.
//
// A split's result as the epilogue (decode_epilogue.cuh, write_rows) would
// write it: out_s = O * (out_scale / l) per output, LSE (m + log2 l) ln 2, l
// the row sum over the column groups (summed in the same order); the fold
// then takes (out_s, LSE) exactly as the combine reads them back.
#pragma once

#include <cmath>

#include "cuda/sm80/decode/decode_epilogue.cuh"
#include "cuda/sm80/decode/decode_mainloop.cuh"
#include "cuda/smxx/decode_fold.cuh"

namespace lattn::cuda::sm80 {

// The fold's accumulators live in the plan's fold scratch (one row block per
// part: plan.fold_o), not in registers: the 16-row kernel already uses ~250
// registers, and 32 more spilled. Each thread reads and writes only its own
// outputs (program order; in L2), once per split.
template <class K>
struct SplitFold {
  static_assert(K::kMTiles == 1, "the in-CTA fold serves 16-row tiles");
  float lse[2] = {-INFINITY, -INFINITY};  // this thread's two phase-1 rows (kept by the rows' owners)
  bool empty = true;                      // nothing folded yet (the scratch holds stale values)
  float* acc = nullptr;                   // this thread's first output in the scratch; its others at + 8 ni (+ 8 L)
};

template <class K>
__device__ __forceinline__ SplitFold<K> make_split_fold(const DecodeParams& p, const DecodeRequestView& rv) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  SplitFold<K> f;
  f.acc = p.plan.fold_o + (int64_t(blockIdx.y) * p.plan.rows_capacity + rv.row0 + lane / 4) * K::kL +
          warp * K::kColsPerWarp + (lane % 4) * 2;
  return f;
}

// The split that (st, o) hold is finished: fold it into f, then start the
// next split from scratch (st and o reset). `reduce` and `row_vec` are the
// main loop's scratch (free between tiles). last: the piece's last split —
// the folded values are left in `o` (phase 2 layout) for write_folded
// instead of the scratch.
template <class K>
__device__ __forceinline__ void fold_split(const DecodeParams& p, SplitFold<K>& f, SoftmaxState& st,
                                           float (&o)[K::kMTiles][K::kNTilesO][4], float* reduce, float* row_vec,
                                           bool last) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rg = warp % K::kRowGroups, cg = warp / K::kRowGroups;
  publish_row_sums<K>(st, reduce);  // decode_epilogue.cuh
  if (cg == 0 && lane % 4 == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = rg * 16 + lane / 4 + 8 * i;
      const float l = column_group_sum<K>(reduce, row), lse = row_lse(st.m[i], l);
      const float factor = l == 0.f ? 0.f : p.out_scale / l;
      const FoldWeights w = fold_weights(f.lse[i], lse);
      f.lse[i] = w.lse;
      // This thread alone reads its rows' entries of `reduce`: it may reuse them.
      row_vec[row] = factor;
      row_vec[K::kBlockM + row] = w.wa;
      reduce[row] = w.wb;
    }
  }
  __syncthreads();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = lane / 4 + 8 * half;
    const float factor = row_vec[row];
    const FoldWeights w{row_vec[K::kBlockM + row], reduce[row], 0.f};
    float* acc = f.acc + 8 * half * K::kL;
    float2 a[K::kNTilesO];
#pragma unroll
    for (int ni = 0; ni < K::kNTilesO; ++ni) {
      a[ni] = f.empty ? make_float2(0.f, 0.f) : *reinterpret_cast<const float2*>(acc + ni * 8);
    }
#pragma unroll
    for (int ni = 0; ni < K::kNTilesO; ++ni) {
      a[ni].x = fold_elem(a[ni].x, __fmul_rn(o[0][ni][2 * half], factor), w);
      a[ni].y = fold_elem(a[ni].y, __fmul_rn(o[0][ni][2 * half + 1], factor), w);
      if (last) {
        o[0][ni][2 * half] = a[ni].x;
        o[0][ni][2 * half + 1] = a[ni].y;
      } else {
        *reinterpret_cast<float2*>(acc + ni * 8) = a[ni];
      }
    }
  }
  f.empty = false;
  if (!last) {
    zero_o<K>(o);
    st = SoftmaxState{{-INFINITY, -INFINITY}, {0.f, 0.f}};
  }
  // The scratch is written again only after the main loop's next barrier.
}

// The folded rows [rv.row0, +kBlockM) of a request: slot < 0, the final
// output and LSE; else into partial slot `slot` (the piece's last split's),
// with LSE -inf in the `empty` slots before it (the piece's earlier splits,
// which the combine's fold then keeps at nothing).
template <class K>
__device__ __forceinline__ void write_folded(const DecodeParams& p, const DecodeRequestView& rv, const SplitFold<K>& f,
                                             const float (&acc)[K::kMTiles][K::kNTilesO][4], int slot, int empty) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rg = warp % K::kRowGroups, cg = warp / K::kRowGroups;
  const int n_rows = rv.rows - rv.row0;
  const int col0 = warp * K::kColsPerWarp + (lane % 4) * 2;
#pragma unroll
  for (int mi = 0; mi < K::kMTiles; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = mi * 16 + lane / 4 + 8 * half;
      if (row >= n_rows) continue;
      store_o_row<K>(p, rv, slot, row, col0,
                     [&](int ni) { return make_float2(acc[mi][ni][2 * half], acc[mi][ni][2 * half + 1]); });
    }
  }
  if (cg == 0 && lane % 4 == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = rg * 16 + lane / 4 + 8 * i;
      if (row >= n_rows) continue;
      const int gr = rv.row0 + row;
      if (slot < 0) {
        if (p.lse) {
          const int j = gr / p.num_heads, h = gr % p.num_heads;
          p.lse[h * p.lse_stride_h + int64_t(rv.q0 + j) * p.lse_stride_t] = f.lse[i];
        }
      } else {
        for (int s = slot - empty; s < slot; ++s)
          p.plan.partial_lse[int64_t(s) * p.plan.rows_capacity + gr] = -INFINITY;
        p.plan.partial_lse[int64_t(slot) * p.plan.rows_capacity + gr] = f.lse[i];
      }
    }
  }
}

}  // namespace lattn::cuda::sm80
