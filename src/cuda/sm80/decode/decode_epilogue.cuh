// src/cuda/sm80/decode/decode_epilogue.cuh — the end of one (request, KV range) of
// the decode kernel: combine the per-thread row sums, normalize O, and write
// either the final output and LSE (request not split) or a partial result
// for decode_combine (request split over several CTAs).
#pragma once

#include <cmath>

#include "cuda/sm80/decode/decode_mainloop.cuh"

namespace lattn::cuda::sm80 {

template <class K>
__device__ __forceinline__ void write_o(const DecodeParams& p, const RequestView& rv, SoftmaxState& st,
                                        float (&o)[K::kMTiles][K::kNTilesO][4], int slot, int rg, int cg, int warp,
                                        float* reduce, float* row_vec) {
  using T = typename K::T;
  const int lane = threadIdx.x % 32;
  // 1. Row sums over all column groups; 1/l and the LSE of each row.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float l = quad_sum(st.l[i]);
    if (lane % 4 == 0) reduce[cg * K::kBlockM + rg * 16 + lane / 4 + 8 * i] = l;
  }
  __syncthreads();
  if (cg == 0 && lane % 4 == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = rg * 16 + lane / 4 + 8 * i;
      float l = 0.f;
#pragma unroll
      for (int g = 0; g < K::kColGroups; ++g) l += reduce[g * K::kBlockM + row];
      // A row that saw no key: output 0, LSE -inf. A NaN row sum (the row
      // attended to a NaN) gives NaN output and LSE.
      row_vec[row] = l == 0.f ? 0.f : p.out_scale / l;
      row_vec[K::kBlockM + row] = l == 0.f ? -INFINITY : (st.m[i] + log2f(l)) * 0.69314718055994531f;
    }
  }
  __syncthreads();

  // 2. Outputs (phase 2 layout: this warp's columns of every row).
  const int col_base = warp * K::kColsPerWarp + (lane % 4) * 2;
#pragma unroll
  for (int mi = 0; mi < K::kMTiles; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = mi * 16 + lane / 4 + 8 * half;
      const int gr = rv.row0 + row;
      if (gr >= rv.rows) continue;
      const float inv = row_vec[row];
      if (slot < 0) {
        const int j = gr / p.num_heads, h = gr % p.num_heads;
        T* out = static_cast<T*>(p.out) + (rv.q0 + j) * p.out_stride_t + h * p.out_stride_h + col_base;
#pragma unroll
        for (int ni = 0; ni < K::kNTilesO; ++ni) {
          *reinterpret_cast<uint32_t*>(out + ni * 8) =
              pack2<T>(o[mi][ni][2 * half] * inv, o[mi][ni][2 * half + 1] * inv);
        }
      } else {
        float* out = p.plan.partial_o + (int64_t(slot) * p.plan.rows_capacity + gr) * K::kL + col_base;
#pragma unroll
        for (int ni = 0; ni < K::kNTilesO; ++ni) {
          *reinterpret_cast<float2*>(out + ni * 8) = make_float2(o[mi][ni][2 * half] * inv, o[mi][ni][2 * half + 1] * inv);
        }
      }
    }
  }
  for (int row = threadIdx.x; row < K::kBlockM; row += K::kThreads) {
    const int gr = rv.row0 + row;
    if (gr >= rv.rows) continue;
    const float lse = row_vec[K::kBlockM + row];
    if (slot < 0) {
      if (p.lse) {
        const int j = gr / p.num_heads, h = gr % p.num_heads;
        p.lse[h * p.lse_stride_h + int64_t(rv.q0 + j) * p.lse_stride_t] = lse;
      }
    } else {
      p.plan.partial_lse[int64_t(slot) * p.plan.rows_capacity + gr] = lse;
    }
  }
}

}  // namespace lattn::cuda::sm80
