// The split-KV combine (arXiv:2501.01005 §2.2 generalized to n parts):
//   lse = log sum_s exp(lse_s),  out = sum_s exp(lse_s - lse) * out_s
// where out_s = O_s / l_s are the normalized partials. Parts whose rows saw
// no key have lse_s = -inf and weight 0.
#include "cuda/smxx/decode_combine.h"

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/dtype_device.cuh"

namespace lattn::cuda {
namespace {

constexpr int kCombineThreads = 128;
constexpr int kMaxSplits = 2048;  // >= slot capacity (2 * num_parts), checked on the host

template <class T>
__global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(const __grid_constant__ DecodeParams p) {
  __shared__ float weights[kMaxSplits];
  __shared__ float red[kCombineThreads / 32];
  __shared__ float final_lse;
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
  if (n == 0) {
    for (int c = threadIdx.x; c < p.L; c += kCombineThreads) out[c] = from_f32<T>(0.f);
    if (lse_out && threadIdx.x == 0) *lse_out = -INFINITY;
    return;
  }
  const int slot0 = plan.split_offset[r];
  const float* lse = plan.partial_lse + int64_t(slot0) * plan.rows_capacity + row;

  // Max of the parts' LSE, then their weights.
  float m = -INFINITY;
  for (int s = threadIdx.x; s < n; s += kCombineThreads) m = fmaxf(m, lse[int64_t(s) * plan.rows_capacity]);
  for (int d = 16; d > 0; d /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
  __syncthreads();
  m = red[0];
  for (int w = 1; w < kCombineThreads / 32; ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  float sum = 0.f;
  for (int s = threadIdx.x; s < n; s += kCombineThreads) {
    const float e = m == -INFINITY ? 0.f : exp2f((lse[int64_t(s) * plan.rows_capacity] - m) * 1.4426950408889634f);
    weights[s] = e;
    sum += e;
  }
  for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < kCombineThreads / 32; ++w) total += red[w];
    final_lse = total > 0.f ? m + logf(total) : -INFINITY;
    red[0] = total > 0.f ? 1.f / total : 0.f;
  }
  __syncthreads();
  const float inv = red[0];
  const float* part = plan.partial_o + (int64_t(slot0) * plan.rows_capacity + row) * p.L;
  const int64_t part_stride = int64_t(plan.rows_capacity) * p.L;
  if (p.L % 4 == 0) {
    for (int c = threadIdx.x * 4; c < p.L; c += kCombineThreads * 4) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int s = 0; s < n; ++s) {
        const float w = weights[s];
        if (w == 0.f) continue;  // a part that saw no key for this row
        const float4 v = *reinterpret_cast<const float4*>(part + s * part_stride + c);
        acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
      }
      out[c] = from_f32<T>(acc.x * inv);
      out[c + 1] = from_f32<T>(acc.y * inv);
      out[c + 2] = from_f32<T>(acc.z * inv);
      out[c + 3] = from_f32<T>(acc.w * inv);
    }
  } else {
    for (int c = threadIdx.x; c < p.L; c += kCombineThreads) {
      float acc = 0.f;
      for (int s = 0; s < n; ++s) {
        if (weights[s] != 0.f) acc += weights[s] * part[s * part_stride + c];
      }
      out[c] = from_f32<T>(acc * inv);
    }
  }
  if (lse_out && threadIdx.x == 0) *lse_out = final_lse;
}

}  // namespace

void launch_decode_combine(const DecodeParams& p, DType out_dtype, cudaStream_t stream) {
  if (p.plan.slot_capacity > kMaxSplits) {
    throw RuntimeError("decode_combine: " + std::to_string(p.plan.slot_capacity) + " split slots exceed the limit " +
                       std::to_string(kMaxSplits));
  }
  const dim3 grid(unsigned(p.batch), unsigned(p.plan.rows_capacity));
  LATTN_DISPATCH_HALF_TYPES(out_dtype, "decode", "out",
                            [&] { decode_combine_kernel<T><<<grid, kCombineThreads, 0, stream>>>(p); });
  LATTN_CUDA_CHECK_LAUNCH("decode_combine_kernel");
}

}  // namespace lattn::cuda
