// The split-KV combine (arXiv:2501.01005 §2.2 generalized to n parts):
//   lse = log sum_s exp(lse_s),  out = sum_s exp(lse_s - lse) * out_s
// where out_s = O_s / l_s are the normalized partials. Parts whose rows saw
// no key have lse_s = -inf and weight 0 (not read); a NaN lse_s makes the row
// NaN. The parts are summed in a fixed order for a given number of parts, so
// with a fixed split size (batch-invariant mode) the bits do not depend on
// the batch.
#include "cuda/smxx/decode_combine.h"

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/dtype_device.cuh"

namespace lattn::cuda {
namespace {

// A CTA merges 128 columns of one row: 8 groups of 32 threads, each thread
// owning 4 columns, the groups taking every 8th split. Grid (batch, rows,
// L / 128): a batch of one with every SM's partials still spreads over
// rows x 4 CTAs, each with 8 loads in flight per column.
constexpr int kColThreads = 32, kSplitGroups = 8, kCombineThreads = kColThreads * kSplitGroups;
constexpr int kColsPerCta = kColThreads * 4;
// >= a request's splits: balanced plans have at most 2 * num_parts slots in
// all; batch-invariant plans are checked per request on the host.
constexpr int kMaxSplits = kMaxDecodeSplitsPerRequest;

// max(a, b), NaN when either is NaN: a part that attended to a NaN makes the row NaN.
__device__ __forceinline__ float max_nan(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : fmaxf(a, b); }

__device__ __forceinline__ float block_reduce(float v, float* red, bool is_max) {
  for (int d = 16; d > 0; d /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, d);
    v = is_max ? max_nan(v, o) : v + o;
  }
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kCombineThreads / 32; ++w) r = is_max ? max_nan(r, red[w]) : r + red[w];
  __syncthreads();
  return r;
}

template <class T>
__global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(const __grid_constant__ DecodeParams p) {
  __shared__ float weights[kMaxSplits];
  __shared__ float red[kCombineThreads / 32];
  __shared__ float4 group_acc[kSplitGroups][kColThreads];
  const DecodePlan& plan = p.plan;
  const int r = blockIdx.x, row = blockIdx.y;
  const int n = plan.num_splits[r];
  if (n == 1) return;
  const int q0 = p.query_start_loc[r];
  const int s_q = p.query_start_loc[r + 1] - q0;
  if (row >= s_q * p.num_heads) return;
  const int j = row / p.num_heads, h = row % p.num_heads;
  T* out = static_cast<T*>(p.out) + (q0 + j) * p.out_stride_t + h * p.out_stride_h;
  float* lse_out = p.lse ? p.lse + h * p.lse_stride_h + int64_t(q0 + j) * p.lse_stride_t : nullptr;
  if (n == 0) {  // no keys: output 0, LSE -inf
    for (int c = blockIdx.z * kColsPerCta + threadIdx.x; c < min(p.L, int(blockIdx.z + 1) * kColsPerCta);
         c += kCombineThreads) {
      out[c] = from_f32<T>(0.f);
    }
    if (lse_out && threadIdx.x == 0 && blockIdx.z == 0) *lse_out = -INFINITY;
    return;
  }
  const int slot0 = plan.split_offset[r];
  const float* lse = plan.partial_lse + int64_t(slot0) * plan.rows_capacity + row;

  // The parts' LSE -> weights exp(lse_s - lse), lse = log sum exp(lse_s).
  float m = -INFINITY;
  for (int s = threadIdx.x; s < n; s += kCombineThreads) m = max_nan(m, lse[int64_t(s) * plan.rows_capacity]);
  m = block_reduce(m, red, true);
  float sum = 0.f;
  for (int s = threadIdx.x; s < n; s += kCombineThreads) {
    const float e = m == -INFINITY ? 0.f : exp2f((lse[int64_t(s) * plan.rows_capacity] - m) * 1.4426950408889634f);
    weights[s] = e;
    sum += e;
  }
  sum = block_reduce(sum, red, false);  // its barriers also publish `weights`
  // sum is NaN when a part's LSE was NaN: output and LSE NaN then.
  const float inv = sum == 0.f ? 0.f : 1.f / sum;
  const float final_lse = sum == 0.f ? -INFINITY : m + logf(sum);

  const float* part = plan.partial_o + (int64_t(slot0) * plan.rows_capacity + row) * p.L;
  const int64_t part_stride = int64_t(plan.rows_capacity) * p.L;
  const int ct = threadIdx.x % kColThreads, g = threadIdx.x / kColThreads;
  // p.L % 4 == 0 (the tensor-core path's L = 512): float4 columns.
  {
    const int c = blockIdx.z * kColsPerCta + ct * 4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < p.L) {
      // Parts with weight 0 (no key for this row) are skipped. Two loads in
      // flight per iteration (a plain unrolled loop made ptxas spill).
      int s = g;
      for (; s + kSplitGroups < n; s += 2 * kSplitGroups) {
        const float w0 = weights[s], w1 = weights[s + kSplitGroups];
        const float4 v0 = *reinterpret_cast<const float4*>(part + s * part_stride + c);
        const float4 v1 = *reinterpret_cast<const float4*>(part + (s + kSplitGroups) * part_stride + c);
        if (w0 != 0.f) acc.x += w0 * v0.x, acc.y += w0 * v0.y, acc.z += w0 * v0.z, acc.w += w0 * v0.w;
        if (w1 != 0.f) acc.x += w1 * v1.x, acc.y += w1 * v1.y, acc.z += w1 * v1.z, acc.w += w1 * v1.w;
      }
      if (s < n && weights[s] != 0.f) {
        const float w = weights[s];
        const float4 v = *reinterpret_cast<const float4*>(part + s * part_stride + c);
        acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
      }
    }
    group_acc[g][ct] = acc;
    __syncthreads();
    if (g == 0 && c < p.L) {
      for (int k = 1; k < kSplitGroups; ++k) {
        const float4 v = group_acc[k][ct];
        acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
      }
      out[c] = from_f32<T>(acc.x * inv);
      out[c + 1] = from_f32<T>(acc.y * inv);
      out[c + 2] = from_f32<T>(acc.z * inv);
      out[c + 3] = from_f32<T>(acc.w * inv);
    }
    __syncthreads();
  }
  if (lse_out && threadIdx.x == 0 && blockIdx.z == 0) *lse_out = final_lse;
}

}  // namespace

void launch_decode_combine(const DecodeParams& p, DType out_dtype, cudaStream_t stream) {
  if (p.L % 4 != 0) {
    throw NotImplementedError("decode_combine: latent dim " + std::to_string(p.L) + " is not a multiple of 4");
  }
  if (!p.plan.batch_invariant && p.plan.slot_capacity > kMaxSplits) {
    throw RuntimeError("decode_combine: " + std::to_string(p.plan.slot_capacity) + " split slots exceed the limit " +
                       std::to_string(kMaxSplits));
  }
  const dim3 grid(unsigned(p.batch), unsigned(p.plan.rows_capacity), unsigned((p.L + kColsPerCta - 1) / kColsPerCta));
  LATTN_DISPATCH_HALF_TYPES(out_dtype, "decode", "out",
                            [&] { decode_combine_kernel<T><<<grid, kCombineThreads, 0, stream>>>(p); });
  LATTN_CUDA_CHECK_LAUNCH("decode_combine_kernel");
}

}  // namespace lattn::cuda
