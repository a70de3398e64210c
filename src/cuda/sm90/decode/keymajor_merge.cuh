// src/cuda/sm90/decode/keymajor_merge.cuh — the end of a piece in both
// key-major Hopper decode kernels (fp8_kernel.cuh, km16_kernel.cuh): the two
// consumer warpgroups took alternate tiles with their own online-softmax
// states; here warpgroup 1 hands its state to warpgroup 0, which merges the
// two. How each kernel then stores O and the LSE is its own.
#pragma once

#include <cmath>

#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/decode/fp8_mainloop.cuh"  // Fp8SoftmaxState, kFp8BarAll
#include "cuda/smxx/decode_params.h"

namespace lattn::cuda::sm90 {

// The packed row (of the CTA's K::kRows) of a consumer thread's state index i
// (0..3): rows 8 (i / 2) + 2t + (i % 2) for lane t = lane % 4, as the m64n16
// accumulators lay out their N columns (fp8_mainloop.cuh, km16_mainloop.cuh).
__device__ __forceinline__ int keymajor_row(int i, int t) { return 8 * (i / 2) + 2 * t + (i % 2); }

// Both consumer warpgroups call it (g: the caller's) at the end of a piece:
// warpgroup 1 writes its row sums, maxima and O^T to shared memory (row_sum
// [2 wg][4 warps][kRows] holds both warpgroups' sums, stat [kRows], merge
// [kOBlocks * 8][128 threads] f32), then both wait for each other. After it
// warpgroup 1 is done with the piece; warpgroup 0 calls
// keymajor_merge_warpgroups.
template <class K>
__device__ __forceinline__ void keymajor_hand_over(const Fp8SoftmaxState& st, const float (&o)[K::kOBlocks][8], int g,
                                                   float* row_sum, float* stat, float* merge) {
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32, gid = lane / 4, t = lane % 4;
  const int tid = threadIdx.x % 128;
  float l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    l[i] = st.l[i];
#pragma unroll
    for (int off = 4; off < 32; off *= 2) l[i] += __shfl_xor_sync(0xffffffffu, l[i], off);
  }
  if (gid == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int n = keymajor_row(i, t);
      row_sum[(g * 4 + w) * K::kRows + n] = l[i];
      if (g == 1 && w == 0) stat[n] = st.m[i];
    }
  }
  if (g == 1) {
#pragma unroll
    for (int mb = 0; mb < K::kOBlocks; ++mb) {
#pragma unroll
      for (int r = 0; r < 8; ++r) merge[(mb * 8 + r) * 128 + tid] = o[mb][r];
    }
  }
  named_barrier_sync(kFp8BarAll, K::kConsumerThreads);
}

// Warpgroup 0, after keymajor_hand_over: o = the two warpgroups' O^T merged
// and divided by the row sums, times p.out_scale; lse[i] = the natural-log
// LSE of the thread's row i (keymajor_row). A row that saw no key gets 0 and
// -inf; a NaN sum (the row saw a NaN) passes through.
template <class K>
__device__ __forceinline__ void keymajor_merge_warpgroups(const DecodeParams& p, const Fp8SoftmaxState& st,
                                                          float (&o)[K::kOBlocks][8], const float* row_sum,
                                                          const float* stat, const float* merge, float (&lse)[4]) {
  const int t = threadIdx.x % 4, tid = threadIdx.x % 128;
  float f0[4], f1[4], inv[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int n = keymajor_row(i, t);
    float l0 = 0.f, l1 = 0.f;
#pragma unroll
    for (int ww = 0; ww < 4; ++ww) {
      l0 += row_sum[ww * K::kRows + n];
      l1 += row_sum[(4 + ww) * K::kRows + n];
    }
    const float m0 = st.m[i], m1 = stat[n];
    const float mm = fmaxf(m0, m1);
    const float base = mm == -INFINITY ? 0.f : mm;
    f0[i] = exp2f(m0 - base);
    f1[i] = exp2f(m1 - base);
    const float total = l0 * f0[i] + l1 * f1[i];
    const bool seen = !(total <= 0.f);
    inv[i] = seen ? p.out_scale / total : 0.f;
    lse[i] = seen ? (base + log2f(total)) * 0.69314718055994531f : -INFINITY;
  }
#pragma unroll
  for (int mb = 0; mb < K::kOBlocks; ++mb) {
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int i = 2 * (r / 4) + (r % 2);
      o[mb][r] = (o[mb][r] * f0[i] + merge[(mb * 8 + r) * 128 + tid] * f1[i]) * inv[i];
    }
  }
}

}  // namespace lattn::cuda::sm90
