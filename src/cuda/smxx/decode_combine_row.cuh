// src/cuda/smxx/decode_combine_row.cuh — one warp merges (a slice of) one
// row of one request's split-KV partials: decode_combine.cu's arithmetic.
// The batch-invariant variant (a left fold over the splits, decode_fold.cuh)
// is shared by the combine kernel and the one-launch kernel (decode_fused.cu),
// and its fold by the sm80 decode kernel, which folds the splits of a request
// it walks itself: in the batch-invariant mode a request's row must not
// depend on which of them merged it (the one-launch kernel serves small
// batches, the combine kernel large ones, the decode kernel whole requests).
//
// Balanced plans:
//   lse = log sum_s exp(lse_s),  out = sum_s exp(lse_s - lse) * out_s
// over the normalized partials out_s = O_s / l_s. Parts whose rows saw no key
// have lse_s = -inf and weight 0 (not read); a NaN lse_s makes the row NaN.
// The parts are summed one after another in increasing order, so the bits
// depend only on the partials and their number.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/dtype_device.cuh"
#include "cuda/common/fast_math.cuh"  // max_nan: a part that attended to a NaN makes the row NaN
#include "cuda/smxx/batch_invariant_split.h"
#include "cuda/smxx/decode_fold.cuh"
#include "cuda/smxx/decode_params.h"

namespace lattn::cuda {

__device__ __forceinline__ void combine_fma4(float4& acc, float w, const float4& v) {
  acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
}

// Four outputs at out[c..c+3]: one 8-byte store where aligned.
template <class T>
__device__ __forceinline__ void combine_store4(T* out, const float4& v) {
  if (reinterpret_cast<uintptr_t>(out) % 8 == 0) {
    union {
      T t[4];
      uint2 u;
    } pack;
    pack.t[0] = from_f32<T>(v.x), pack.t[1] = from_f32<T>(v.y), pack.t[2] = from_f32<T>(v.z),
    pack.t[3] = from_f32<T>(v.w);
    *reinterpret_cast<uint2*>(out) = pack.u;
  } else {
    out[0] = from_f32<T>(v.x), out[1] = from_f32<T>(v.y), out[2] = from_f32<T>(v.z), out[3] = from_f32<T>(v.w);
  }
}

// The weights of a row's n parts, as the calling warp computes them (every
// lane gets the same values): m = max lse_s (a NaN makes it NaN), weight(s) =
// exp(lse_s - m) (0 for every part when all are -inf), sum over the parts in
// a fixed order (lane strides, then a butterfly), inv = 1 / sum and the row's
// LSE m + log(sum); sum 0 (no part saw a key) gives 0 and -inf, a NaN sum NaN.
template <class Load>
struct CombineWeights {
  const float* lse;  // part s's LSE at lse[s * stride]
  int64_t stride;
  Load ld;
  float m = -INFINITY, inv = 0.f, lse_total = -INFINITY;

  __device__ __forceinline__ CombineWeights(const float* lse_, int64_t stride_, int n, Load ld_)
      : lse(lse_), stride(stride_), ld(ld_) {
    const int lane = threadIdx.x % 32;
    for (int s = lane; s < n; s += 32) m = max_nan(m, ld(lse + s * stride));
#pragma unroll
    for (int d = 16; d > 0; d /= 2) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, d));
    float sum = 0.f;
    for (int s = lane; s < n; s += 32) sum += (*this)(s);
#pragma unroll
    for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    inv = sum == 0.f ? 0.f : 1.f / sum;
    lse_total = sum == 0.f ? -INFINITY : m + logf(sum);
  }
  __device__ __forceinline__ float operator()(int s) const {
    return m == -INFINITY ? 0.f : exp2f((ld(lse + s * stride) - m) * 1.4426950408889634f);
  }
};

// Where packed row `row` (< s_q * num_heads) of request r is written: its
// output row, and its LSE (nullptr where p.lse is, or for a caller that
// leaves the LSE to another warp: with_lse false).
template <class T>
struct CombineRowOut {
  T* out;      // [L]
  float* lse;  // one float, may be nullptr
};

template <class T>
__device__ __forceinline__ CombineRowOut<T> combine_row_out(const DecodeParams& p, int r, int row, bool with_lse) {
  const int q0 = p.query_start_loc[r];
  const int j = row / p.num_heads, h = row % p.num_heads;
  return {static_cast<T*>(p.out) + (q0 + j) * p.out_stride_t + h * p.out_stride_h,
          p.lse && with_lse ? p.lse + h * p.lse_stride_h + int64_t(q0 + j) * p.lse_stride_t : nullptr};
}

// One warp's 128-column slice of a row (the slice merges below): lane i
// owns float4 column c4 = 32 * slice + i (in: c4 < L / 4); slice 0 writes the
// LSE. The row's n parts: LSE s at lse[s * rows_capacity], the lane's float4
// of part s at part[s * part_stride4].
template <class T>
struct CombineSlice {
  int c4;
  bool in;
  CombineRowOut<T> dst;
  const float* lse;
  int64_t part_stride4;  // float4s from one part to the next
  const float4* part;
};

template <class T>
__device__ __forceinline__ CombineSlice<T> combine_slice(const DecodeParams& p, int r, int row, int slot0, int slice) {
  const DecodePlan& plan = p.plan;
  CombineSlice<T> v;
  v.c4 = slice * 32 + threadIdx.x % 32;
  v.in = v.c4 < p.L / 4;
  v.dst = combine_row_out<T>(p, r, row, slice == 0);
  v.lse = plan.partial_lse + int64_t(slot0) * plan.rows_capacity + row;
  v.part_stride4 = int64_t(plan.rows_capacity) * (p.L / 4);
  v.part = reinterpret_cast<const float4*>(plan.partial_o + (int64_t(slot0) * plan.rows_capacity + row) * p.L) + v.c4;
  return v;
}

// Row `row` (< s_q * num_heads) of request r, whose n parts' partials start
// at slot slot0 (n == 0: no keys, output 0 and LSE -inf; n == 1 is never
// merged: its only part wrote the output). The calling warp's lanes all take
// part. Loads: ld(const float4*) and ld(const float*) read the partials
// (__ldcs in the combine kernel; __ldcg where they were written in the same
// launch). Lane i owns float4 columns i, i + 32, ... (kColChunks of them per
// pass, in registers), two parts' loads in flight per step.
template <class T, class Load>
__device__ __forceinline__ void combine_decode_row(const DecodeParams& p, int r, int row, int n, int slot0, Load ld) {
  constexpr int kColChunks = 4;  // float4 columns per lane per pass (L <= 512 in one pass)
  const DecodePlan& plan = p.plan;
  const int lane = threadIdx.x % 32;
  const int cols4 = p.L / 4;
  const int64_t part_stride = int64_t(plan.rows_capacity) * p.L;
  const CombineRowOut<T> dst = combine_row_out<T>(p, r, row, true);
  T* const out = dst.out;
  float* const lse_out = dst.lse;
  if (n == 0) {  // no keys: output 0, LSE -inf
    for (int c4 = lane; c4 < cols4; c4 += 32) combine_store4(out + 4 * c4, make_float4(0.f, 0.f, 0.f, 0.f));
    if (lse_out && lane == 0) *lse_out = -INFINITY;
    return;
  }
  const float* lse = plan.partial_lse + int64_t(slot0) * plan.rows_capacity + row;

  // The parts' LSE -> weights exp(lse_s - m) / sum, m = max lse_s.
  const CombineWeights<Load> weight(lse, plan.rows_capacity, n, ld);
  const float inv = weight.inv, final_lse = weight.lse_total;

  const float* part = plan.partial_o + (int64_t(slot0) * plan.rows_capacity + row) * p.L;
  for (int cbase = 0; cbase < cols4; cbase += 32 * kColChunks) {
    float4 acc[kColChunks];
#pragma unroll
    for (int k = 0; k < kColChunks; ++k) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    // Parts with weight 0 (no key for this row) add nothing (their partials
    // may be stale). Two parts' loads are issued before either is added.
    int s = 0;
    for (; s + 1 < n; s += 2) {
      const float w0 = weight(s), w1 = weight(s + 1);
      const float4* v0p = reinterpret_cast<const float4*>(part + s * part_stride) + cbase + lane;
      const float4* v1p = reinterpret_cast<const float4*>(part + (s + 1) * part_stride) + cbase + lane;
      float4 v0[kColChunks], v1[kColChunks];
#pragma unroll
      for (int k = 0; k < kColChunks; ++k) {
        const bool in = cbase + lane + 32 * k < cols4;
        v0[k] = in ? ld(v0p + 32 * k) : make_float4(0.f, 0.f, 0.f, 0.f);
        v1[k] = in ? ld(v1p + 32 * k) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int k = 0; k < kColChunks; ++k) {
        if (w0 != 0.f) combine_fma4(acc[k], w0, v0[k]);
        if (w1 != 0.f) combine_fma4(acc[k], w1, v1[k]);
      }
    }
    if (s < n) {
      const float w0 = weight(s);
      const float4* v0p = reinterpret_cast<const float4*>(part + s * part_stride) + cbase + lane;
#pragma unroll
      for (int k = 0; k < kColChunks; ++k) {
        if (w0 != 0.f && cbase + lane + 32 * k < cols4) combine_fma4(acc[k], w0, ld(v0p + 32 * k));
      }
    }
#pragma unroll
    for (int k = 0; k < kColChunks; ++k) {
      const int c4 = cbase + lane + 32 * k;
      if (c4 < cols4) {
        combine_store4(out + 4 * c4, make_float4(acc[k].x * inv, acc[k].y * inv, acc[k].z * inv, acc[k].w * inv));
      }
    }
  }
  if (lse_out && lane == 0) *lse_out = final_lse;
}

// The batch-invariant plans' original merge (rule 2 without folding; see
// combine_decode_row_slice below): the same arithmetic per output as
// combine_decode_row (acc = 0, then acc += w_s * out_s for s = 0, 1, ... in
// order, parts of weight 0 skipped, then acc / sum; m and sum reduced the same
// way), but one warp takes one 128-column slice of the row (lane i: float4
// column 32 * slice + i) with kDepth parts' loads in flight at once: those
// plans split a short request into many parts (16-32 at 2048-8192 keys), and
// a step of one or a few requests has too few rows to hide the partials' L2
// latency one or two parts at a time. The slices of a row compute the same m
// and sum; slice 0 writes the LSE.
template <class T, class Load>
__device__ __forceinline__ void combine_decode_row_slice_sum(const DecodeParams& p, int r, int row, int n, int slot0,
                                                             int slice, Load ld) {
  constexpr int kDepth = 8;
  const int lane = threadIdx.x % 32;
  const CombineSlice<T> v = combine_slice<T>(p, r, row, slot0, slice);
  if (n == 0) {  // no keys: output 0, LSE -inf
    if (v.in) combine_store4(v.dst.out + 4 * v.c4, make_float4(0.f, 0.f, 0.f, 0.f));
    if (v.dst.lse && lane == 0) *v.dst.lse = -INFINITY;
    return;
  }
  const CombineWeights<Load> weight(v.lse, p.plan.rows_capacity, n, ld);
  const float inv = weight.inv, final_lse = weight.lse_total;

  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = 0; s0 < n; s0 += kDepth) {
    float w[kDepth];
    float4 x[kDepth];
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      const int s = s0 + k;
      w[k] = s < n ? weight(s) : 0.f;
      x[k] = v.in && s < n ? ld(v.part + s * v.part_stride4) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    // Parts with weight 0 (no key for this row) add nothing (their partials may be stale).
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      if (w[k] != 0.f) combine_fma4(acc, w[k], x[k]);
    }
  }
  if (v.in) combine_store4(v.dst.out + 4 * v.c4, make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
  if (v.dst.lse && lane == 0) *v.dst.lse = final_lse;
}

// The batch-invariant plans' left fold (decode_fold.cuh) over the
// request's n split slots in order (the sm80 decode kernel folds the splits
// of a request it walks itself with the same functions, so a request's bits
// do not depend on which did). One warp takes one 128-column slice of the row
// (lane i: float4 column 32 * slice + i) with kDepth slots' loads in flight at
// once: those plans split a short request into many parts, and a step of one
// or a few requests has too few rows to hide the partials' L2 latency one
// slot at a time. Every lane computes the same fold weights; slice 0 writes
// the LSE.
template <class T, class Load>
__device__ __forceinline__ void combine_decode_row_slice_fold(const DecodeParams& p, int r, int row, int n, int slot0,
                                                              int slice, Load ld) {
  constexpr int kDepth = 8;
  const int lane = threadIdx.x % 32;
  const CombineSlice<T> v = combine_slice<T>(p, r, row, slot0, slice);
  // n == 0 (no keys): nothing folded, output 0 and LSE -inf.
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float acc_lse = -INFINITY;
  for (int s0 = 0; s0 < n; s0 += kDepth) {
    float l[kDepth];
    float4 x[kDepth];
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      const int s = s0 + k;
      l[k] = s < n ? ld(v.lse + int64_t(s) * p.plan.rows_capacity) : -INFINITY;
      x[k] = v.in && s < n ? ld(v.part + s * v.part_stride4) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      const FoldWeights w = fold_weights(acc_lse, l[k]);  // -inf past n: keeps acc
      acc_lse = w.lse;
      acc = fold_elem4(acc, x[k], w);
    }
  }
  if (v.in) combine_store4(v.dst.out + 4 * v.c4, acc);
  if (v.dst.lse && lane == 0) *v.dst.lse = acc_lse;
}

// Which merge a batch-invariant plan's requests get — fixed by the kernel's
// tiles and the head count, like the split rule, so never by the batch: the
// left fold where the kernel folds splits itself (it must give the same bits)
// and under split rules other than 2 (the 64-row tiles and hopper's wgmma
// kernel: more than 16 heads); the original merge (the weights from the row's
// largest LSE, computed in parallel, then summed in split order) under rule 2
// without folding, the 16-row tiles' default, where the fold's sequential
// chain of weights measured slower on an H100 (docs/perf.md, "Batch-invariant
// mode", 7th session).
__host__ __device__ __forceinline__ bool batch_invariant_left_fold(const DecodePlan& plan) {
  return plan.fold_splits || plan.split_rule != kBatchInvariantDefaultSplitRule;
}

template <class T, class Load>
__device__ __forceinline__ void combine_decode_row_slice(const DecodeParams& p, int r, int row, int n, int slot0,
                                                         int slice, Load ld) {
  if (batch_invariant_left_fold(p.plan)) {
    combine_decode_row_slice_fold<T>(p, r, row, n, slot0, slice, ld);
  } else {
    combine_decode_row_slice_sum<T>(p, r, row, n, slot0, slice, ld);
  }
}

}  // namespace lattn::cuda
