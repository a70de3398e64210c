// src/cuda/smxx/decode_combine_row.cuh — one packed row of the split-KV
// combine, as both combines do it: decode_combine.cu (a warp a row, after the
// attention kernel) and decode_fused.cu (a CTA a chunk of a row, after the
// one-launch kernel's grid barrier). They differ in how the threads share
// the parts and the columns; the row's place and arithmetic are these:
//   m = max_s lse_s,  w_s = exp(lse_s - m),  sum = sum_s w_s
//   out = sum_s w_s * out_s / sum,  lse = m + log(sum)
// (arXiv:2501.01005 §2.2 generalized to n parts). A part whose rows saw no key
// has lse_s = -inf and weight 0, and is skipped, never read (its partial may
// be stale); a NaN lse_s makes m, sum, the output and the LSE NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/smxx/decode_params.h"

namespace lattn::cuda {

// Where packed row `row` (= j * num_heads + h) of request r is written:
// output row [L] of token q0 + j, head h, and its LSE (nullptr when the
// caller asked for none).
template <class T>
struct CombineRow {
  T* out;
  float* lse;
};

// False when `row` lies past the request's s_q * num_heads rows (a row of
// the plan's capacity that this request does not have).
template <class T>
__device__ __forceinline__ bool combine_row(const DecodeParams& p, int r, int row, CombineRow<T>& dst) {
  const int q0 = p.query_start_loc[r];
  const int s_q = p.query_start_loc[r + 1] - q0;
  if (row >= s_q * p.num_heads) return false;
  const int j = row / p.num_heads, h = row % p.num_heads;
  dst.out = static_cast<T*>(p.out) + (q0 + j) * p.out_stride_t + h * p.out_stride_h;
  dst.lse = p.lse ? p.lse + h * p.lse_stride_h + int64_t(q0 + j) * p.lse_stride_t : nullptr;
  return true;
}

// w_s for a part of LSE lse_s; 0 for every part when all are -inf.
__device__ __forceinline__ float combine_weight(float lse_s, float m) {
  return m == -INFINITY ? 0.f : exp2f((lse_s - m) * 1.4426950408889634f);
}

// The row's 1 / sum and LSE; sum 0 (no part saw a key): 0 and -inf.
struct CombineTotal {
  float inv, lse;
};
__device__ __forceinline__ CombineTotal combine_total(float m, float sum) {
  return {sum == 0.f ? 0.f : 1.f / sum, sum == 0.f ? -INFINITY : m + logf(sum)};
}

}  // namespace lattn::cuda
