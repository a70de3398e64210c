// src/cuda/smxx/decode_combine_block.cuh — one CTA merges a column chunk of
// one row of one request's split-KV partials (balanced plans only; the
// batch-invariant plans keep decode_combine_row.cuh's per-warp order).
//
// For steps with few rows and many splits (a batch of one at 16 heads: 16
// rows, ~130 splits of 2 tiles each): decode_combine_row.cuh gives a row to
// one warp, which walks the splits two at a time, so a row costs ~65
// dependent L2 round trips and only 16 warps of the GPU work. Here the
// row's kL / 4 float4 columns are cut into `chunks` items, and the kThreads
// threads of a CTA take one item: groups = kThreads / (columns of the item)
// groups of threads each take every groups-th split (all of a thread's first
// kEarly partials loaded at once, before the LSE reductions), then the
// groups' sums are added in group order. Same formula as
// decode_combine_row.cuh (weights exp(lse_s - m) / sum, parts of weight 0
// skipped), another summation order: the bits depend only on the partials,
// their number, kThreads and `chunks`.
//
// Shared by the one-launch kernel's combine phase (decode_fused.cu) and the
// combine kernel's block path (decode_combine.cu).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/dtype_device.cuh"
#include "cuda/common/fast_math.cuh"  // max_nan: a part that attended to a NaN makes the row NaN
#include "cuda/smxx/decode_combine.h"
#include "cuda/smxx/decode_params.h"

namespace lattn::cuda {

// max (NaN-propagating) or sum over the block, to every thread; red holds
// kThreads / 32 floats.
template <int kThreads>
__device__ __forceinline__ float combine_block_reduce(float v, float* red, bool is_max) {
  for (int d = 16; d > 0; d /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, d);
    v = is_max ? max_nan(v, o) : v + o;
  }
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kThreads / 32; ++w) r = is_max ? max_nan(r, red[w]) : r + red[w];
  __syncthreads();
  return r;
}

// The shared memory a CTA's merge needs.
template <int kThreads>
struct CombineBlockSmem {
  float weights[kMaxDecodeSplitsPerRequest];
  float4 group_acc[kThreads];
  float red[kThreads / 32];
};

// Chunk `chunk` of `chunks` of row `row` (< s_q * num_heads) of request r,
// whose n >= 2 parts start at slot slot0 (n == 0: no keys, output 0 and LSE
// -inf). Every thread of the CTA calls it (it has block barriers) with the
// same arguments. Load: ld(const float4*) / ld(const float*) read the
// partials (__ldcg where they were written in the same launch).
template <class T, int kThreads, int kL, class Load>
__device__ __forceinline__ void combine_row_chunk_in_block(const DecodeParams& p, int r, int row, int n, int slot0,
                                                           int chunk, int chunks, CombineBlockSmem<kThreads>& sm,
                                                           Load ld) {
  const DecodePlan& plan = p.plan;
  const int c4 = kL / 4 / chunks;    // float4 columns per item
  const int groups = kThreads / c4;  // split groups per item
  const int rows = plan.rows_capacity;
  const int ct = threadIdx.x % c4, g = threadIdx.x / c4;
  const int q0 = p.query_start_loc[r];
  const int j = row / p.num_heads, h = row % p.num_heads;
  T* out = static_cast<T*>(p.out) + (q0 + j) * p.out_stride_t + h * p.out_stride_h;
  float* lse_out = p.lse ? p.lse + h * p.lse_stride_h + int64_t(q0 + j) * p.lse_stride_t : nullptr;
  const int c = (chunk * c4 + ct) * 4;
  if (n == 0) {  // no keys: output 0, LSE -inf
    if (g == 0) {
#pragma unroll
      for (int k = 0; k < 4; ++k) out[c + k] = from_f32<T>(0.f);
    }
    if (lse_out && threadIdx.x == 0 && chunk == 0) *lse_out = -INFINITY;
    return;
  }
  const float* lse = plan.partial_lse + int64_t(slot0) * rows + row;
  const float* part = plan.partial_o + (int64_t(slot0) * rows + row) * kL + c;
  const int64_t stride = int64_t(rows) * kL;
  // The first kEarly partials of this thread are loaded before the LSE
  // reductions (they do not depend on the weights): their L2 latency
  // overlaps the reductions' barriers.
  constexpr int kEarly = 8;
  float4 early[kEarly];
#pragma unroll
  for (int k = 0; k < kEarly; ++k) {
    const int se = g + k * groups;
    early[k] = se < n ? ld(reinterpret_cast<const float4*>(part + se * stride)) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float m = -INFINITY;
  for (int s = threadIdx.x; s < n; s += kThreads) m = max_nan(m, ld(lse + int64_t(s) * rows));
  m = combine_block_reduce<kThreads>(m, sm.red, true);
  float sum = 0.f;
  for (int s = threadIdx.x; s < n; s += kThreads) {
    const float e = m == -INFINITY ? 0.f : exp2f((ld(lse + int64_t(s) * rows) - m) * 1.4426950408889634f);
    sm.weights[s] = e;
    sum += e;
  }
  sum = combine_block_reduce<kThreads>(sum, sm.red, false);  // its barriers also publish `weights`
  const float inv = sum == 0.f ? 0.f : 1.f / sum;
  const float final_lse = sum == 0.f ? -INFINITY : m + logf(sum);

  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  auto add = [&](float w, float4 v) {
    // A part with weight 0 saw no key of this row: skipped (never 0 * NaN).
    if (w != 0.f) acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
  };
#pragma unroll
  for (int k = 0; k < kEarly; ++k) {
    if (g + k * groups < n) add(sm.weights[g + k * groups], early[k]);
  }
  int s = g + kEarly * groups;
  for (; s + 3 * groups < n; s += 4 * groups) {  // four loads in flight
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = ld(reinterpret_cast<const float4*>(part + (s + u * groups) * stride));
#pragma unroll
    for (int u = 0; u < 4; ++u) add(sm.weights[s + u * groups], v[u]);
  }
  for (; s < n; s += groups) add(sm.weights[s], ld(reinterpret_cast<const float4*>(part + s * stride)));
  sm.group_acc[threadIdx.x] = acc;  // [g][ct]
  __syncthreads();
  if (g == 0) {
    for (int k = 1; k < groups; ++k) {
      const float4 v = sm.group_acc[k * c4 + ct];
      acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
    }
    out[c] = from_f32<T>(acc.x * inv);
    out[c + 1] = from_f32<T>(acc.y * inv);
    out[c + 2] = from_f32<T>(acc.z * inv);
    out[c + 3] = from_f32<T>(acc.w * inv);
  }
  if (lse_out && threadIdx.x == 0 && chunk == 0) *lse_out = final_lse;
  __syncthreads();  // group_acc and weights are reused by the next item
}

// How many column chunks a row is cut into for a step of `rows` (request,
// row) pairs, so that there are about as many items as SMs: 8 for a batch
// of one at 16 heads (16 rows x 8 = 128 CTAs), 1 from 128 rows.
__host__ __device__ __forceinline__ int combine_block_chunks(int64_t rows) {
  return rows <= 16 ? 8 : rows <= 32 ? 4 : rows <= 64 ? 2 : 1;
}

}  // namespace lattn::cuda
