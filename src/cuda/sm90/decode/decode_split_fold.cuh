// src/cuda/sm90/decode/decode_split_fold.cuh — the Hopper decode kernel's
// side of the batch-invariant left fold (smxx/decode_fold.cuh), the wgmma
// counterpart of sm80/decode/decode_split_fold.cuh: a CTA that walks several
// splits of one request starting at its first split folds each finished
// split into f32 accumulators instead of writing it as a partial result, with
// the combine kernel's per-output arithmetic, so that a request walked by one
// CTA (large batches: no partials, the copy pipeline never restarts) gets the
// bits it gets when its splits run on many CTAs and the combine folds their
// partials (small batches).
//
// A split's result as write_o (decode_epilogue.cuh) would write it: out_s =
// O * (out_scale / l) per output and LSE (m + log2 l) ln 2
// (row_scale_and_lse), l the full row sum of both warpgroups; the fold then
// takes (out_s, LSE) exactly as the combine reads them back.
//
// Where the accumulators live: 64 rows x 512 f32 (128 KB) per CTA do not fit
// the consumers' registers (O already takes 128 of 240) nor the shared memory
// (Q and the two KV stages take 216 KB), so they go to the plan's fold scratch
// (plan.fold_o, one row block per part) in global memory, where each thread
// reads and writes only its own outputs (its O fragment's positions: no
// barrier, program order), through L2 (__ldcg / __stcg). Each fold costs one
// 128 KB read and write per CTA in L2 against the split's 8 x 72 KB of keys
// (128 heads, 4096 keys); the fold's weights (two per row) stay in registers.
#pragma once

#include <cmath>

#include "cuda/sm90/decode/decode_epilogue.cuh"
#include "cuda/smxx/decode_fold.cuh"

namespace lattn::cuda::sm90 {

// The fold of one piece, per consumer thread: the LSE of its two rows' folded
// splits so far (every thread of a row's quad and of both warpgroups keeps
// the same values) and whether anything was folded yet (the scratch holds
// stale values until then).
struct SplitFold {
  float lse[2] = {-INFINITY, -INFINITY};
  bool empty = true;
};

// This thread's first output in the fold scratch of CTA (M tile of pv, part
// blockIdx.y): row pv.row0 + 16 w + lane / 4 (+ 8 for its second row),
// column 256 g + 2 (lane % 4) (+ 8 n for its n-th pair), as o's fragment.
template <class K>
__device__ __forceinline__ float* fold_scratch(const DecodeParams& p, const DecodeRequestView& pv, int g) {
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  return p.plan.fold_o + (int64_t(blockIdx.y) * p.plan.rows_capacity + pv.row0 + 16 * w + lane / 4) * K::kL +
         g * K::kColsPerWarpgroup + 2 * (lane % 4);
}

// The split that (st, o) hold is finished: fold it into f. Every consumer
// thread calls it (share_row_sums syncs the consumers). last: the piece's
// last split — the folded values are left in `o` for write_folded; else they
// go to the scratch, and the caller starts the next split from scratch.
template <class K>
__device__ __forceinline__ void fold_split(const DecodeParams& p, const DecodeRequestView& pv, SplitFold& f,
                                           const SoftmaxState& st, float (&o)[K::kColsPerWarpgroup / 2], int g,
                                           float* row_sum, bool last) {
  float sums[2];
  share_row_sums<K>(st, g, row_sum, sums);
  float inv[2];
  FoldWeights wt[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float lse;
    row_scale_and_lse(sums[i], st.m[i], p.out_scale, inv[i], lse);
    wt[i] = fold_weights(f.lse[i], lse);
    f.lse[i] = wt[i].lse;
  }
  float* acc = fold_scratch<K>(p, pv, g);
  // Pairs n of the thread's two rows (o[4 n + 2 i + {0, 1}] at column 8 n of
  // row i), in chunks so that a chunk's loads are in flight together without
  // holding a second copy of o in registers.
  constexpr int kPairs = K::kColsPerWarpgroup / 8, kChunk = 8;
#pragma unroll
  for (int n0 = 0; n0 < kPairs; n0 += kChunk) {
    float2 a[2][kChunk];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        a[i][k] = f.empty ? make_float2(0.f, 0.f)
                          : __ldcg(reinterpret_cast<const float2*>(acc + i * 8 * K::kL + 8 * (n0 + k)));
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        const int n = n0 + k;
        a[i][k].x = fold_elem(a[i][k].x, __fmul_rn(o[4 * n + 2 * i], inv[i]), wt[i]);
        a[i][k].y = fold_elem(a[i][k].y, __fmul_rn(o[4 * n + 2 * i + 1], inv[i]), wt[i]);
        if (last) {
          o[4 * n + 2 * i] = a[i][k].x;
          o[4 * n + 2 * i + 1] = a[i][k].y;
        } else {
          __stcg(reinterpret_cast<float2*>(acc + i * 8 * K::kL + 8 * n), a[i][k]);
        }
      }
    }
  }
  f.empty = false;
}

// The folded rows of a piece (values in o, LSE in f): slot < 0, the final
// output and LSE, exactly as the combine would store them; else into partial
// slot `slot` (the piece's last split's), with LSE -inf in the `empty` slots
// before it (the piece's earlier splits, which the combine's fold then keeps
// at nothing, so it takes this slot exactly).
template <class K>
__device__ __forceinline__ void write_folded(const DecodeParams& p, const DecodeRequestView& pv, const SplitFold& f,
                                             const float (&o)[K::kColsPerWarpgroup / 2], int slot, int empty, int g) {
  using T = typename K::T;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
  const int col0 = g * K::kColsPerWarpgroup + 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = pv.row0 + r0 + 8 * i;
    if (gr >= pv.rows) continue;
    const bool lse_owner = g == 0 && lane % 4 == 0;
    if (slot < 0) {
      const int j = gr / p.num_heads, h = gr % p.num_heads;
      T* out = static_cast<T*>(p.out) + (pv.q0 + j) * p.out_stride_t + h * p.out_stride_h + col0;
#pragma unroll
      for (int n = 0; n < K::kColsPerWarpgroup / 8; ++n) {
        *reinterpret_cast<uint32_t*>(out + 8 * n) = sm80::pack2<T>(o[4 * n + 2 * i], o[4 * n + 2 * i + 1]);
      }
      if (p.lse && lse_owner) p.lse[h * p.lse_stride_h + int64_t(pv.q0 + j) * p.lse_stride_t] = f.lse[i];
    } else {
      float* out = p.plan.partial_o + (int64_t(slot) * p.plan.rows_capacity + gr) * K::kL + col0;
#pragma unroll
      for (int n = 0; n < K::kColsPerWarpgroup / 8; ++n) {
        *reinterpret_cast<float2*>(out + 8 * n) = make_float2(o[4 * n + 2 * i], o[4 * n + 2 * i + 1]);
      }
      if (lse_owner) {
        for (int s = slot - empty; s < slot; ++s)
          p.plan.partial_lse[int64_t(s) * p.plan.rows_capacity + gr] = -INFINITY;
        p.plan.partial_lse[int64_t(slot) * p.plan.rows_capacity + gr] = f.lse[i];
      }
    }
  }
}

}  // namespace lattn::cuda::sm90
