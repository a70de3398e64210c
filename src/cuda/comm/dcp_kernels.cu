// The local steps of dcp_combine on a GPU (core/dcp/dcp_kernels.h): the
// LSE rescale and merge of merge_attn_states over W ranks, one thread per
// output element, each recomputing its row's combined LSE from the W values
// (W is small; the steps are bound by memory traffic). All stream-ordered.
#include <cuda_runtime.h>

#include <cmath>

#include "core/dcp/dcp_kernels.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dtype_device.cuh"

namespace lattn::detail {
namespace {

using cuda::DeviceGuard;

constexpr int kThreads = 256;

// log Σ exp of `n` LSE values `stride` apart (+inf read as -inf; NaN propagates).
__device__ __forceinline__ float combined_lse(const float* lse, int n, int64_t stride) {
  float m = -INFINITY;
  for (int r = 0; r < n; ++r) {
    float v = lse[r * stride];
    if (isnan(v)) return v;
    if (v == INFINITY) v = -INFINITY;
    m = fmaxf(m, v);
  }
  if (m == -INFINITY) return -INFINITY;
  float s = 0.f;
  for (int r = 0; r < n; ++r) {
    const float v = lse[r * stride];
    if (v > -INFINITY && v < INFINITY) s += expf(v - m);
  }
  return m + logf(s);
}

// A rank's weight: exactly 0 for an empty side (its output is not read).
__device__ __forceinline__ float rank_weight(float lse_r, float lse) {
  if (isnan(lse_r) || isnan(lse)) return NAN;
  if (!(lse_r > -INFINITY) || lse_r == INFINITY || lse == -INFINITY) return 0.f;
  return expf(lse_r - lse);
}

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }
cudaStream_t as_cuda(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

__global__ void mask_lse_kernel(const float* in, const uint8_t* empty, float* out, int64_t H, int64_t T) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= H * T) return;
  out[i] = empty && empty[i % T] ? -INFINITY : in[i];
}

// scaled [H, T, D] f32 from partial_out [T, H, D]; lse [H, T].
__global__ void rescale_kernel(const void* partial, DType pdt, const float* own, const float* lse_all, int W,
                               float* scaled, float* lse, int64_t T, int64_t H, int64_t D) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= H * T * D) return;
  const int64_t d = idx % D, i = idx / D;  // i = h * T + t
  const int64_t h = i / T, t = i % T;
  const float c = combined_lse(lse_all + i, W, H * T);
  const float w = rank_weight(own[i], c);
  scaled[idx] = w == 0.f ? 0.f : w * cuda::load_f32(partial, pdt, (t * H + h) * D + d);
  if (d == 0) lse[i] = c;
}

// send [H, T, D + 1] (= [W, H / W, T, D + 1]) from partial_out [T, H, D] and own [H, T].
__global__ void pack_rows_kernel(const void* partial, DType pdt, const float* own, float* send, int64_t T, int64_t H,
                                 int64_t D) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = D + 1;
  if (idx >= H * T * row) return;
  const int64_t d = idx % row, i = idx / row;
  const int64_t h = i / T, t = i % T;
  send[idx] = d == D ? own[i] : cuda::load_f32(partial, pdt, (t * H + h) * D + d);
}

// merged [Hs, T, D], lse [Hs, T] from recv [W, Hs, T, D + 1].
__global__ void merge_rows_kernel(const float* recv, int W, float* merged, float* lse, int64_t rows, int64_t D) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * D) return;
  const int64_t d = idx % D, i = idx / D;
  const int64_t row = D + 1, per_rank = rows * row;
  const float* src0 = recv + i * row;
  const float c = combined_lse(src0 + D, W, per_rank);
  float acc = 0.f;
  for (int r = 0; r < W; ++r) {
    const float w = rank_weight(src0[r * per_rank + D], c);
    if (w != 0.f) acc += w * src0[r * per_rank + d];
  }
  merged[idx] = acc;
  if (d == 0) lse[i] = c;
}

// out [T, Ho, D] = Σ_i summed[i] ([n, Ho, T, D], in order); out_lse = lse.
__global__ void finish_kernel(const float* summed, int n, const float* lse, void* out, DType odt, float* out_lse,
                              int64_t Ho, int64_t T, int64_t D) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per = Ho * T * D;
  if (idx >= per) return;
  const int64_t d = idx % D, i = idx / D;
  const int64_t h = i / T, t = i % T;
  float acc = summed[idx];
  for (int k = 1; k < n; ++k) acc += summed[k * per + idx];
  cuda::store_f32(out, odt, (t * Ho + h) * D + d, acc);
  if (out_lse && d == 0) out_lse[i] = lse[i];
}

__global__ void fill_neg_inf_kernel(float* p, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = -INFINITY;
}

void mask_lse(const Tensor& partial_lse, const Tensor& row_empty, const Tensor& own_lse, Stream stream) {
  const int64_t H = partial_lse.size(0), T = partial_lse.size(1);
  if (H * T == 0) return;
  DeviceGuard guard(own_lse.device().index);
  mask_lse_kernel<<<blocks_for(H * T), kThreads, 0, as_cuda(stream)>>>(
      partial_lse.data_as<const float>(), row_empty.defined() ? row_empty.data_as<const uint8_t>() : nullptr,
      own_lse.data_as<float>(), H, T);
  LATTN_CUDA_CHECK_LAUNCH("dcp mask_lse_kernel");
}

void rescale(const Tensor& partial_out, const Tensor& own_lse, const Tensor& lse_all, int, const Tensor& scaled,
             const Tensor& lse, Stream stream) {
  const int64_t T = partial_out.size(0), H = partial_out.size(1), D = partial_out.size(2);
  if (H * T * D == 0) return;
  DeviceGuard guard(scaled.device().index);
  rescale_kernel<<<blocks_for(H * T * D), kThreads, 0, as_cuda(stream)>>>(
      partial_out.data(), partial_out.dtype(), own_lse.data_as<const float>(), lse_all.data_as<const float>(),
      int(lse_all.size(0)), scaled.data_as<float>(), lse.data_as<float>(), T, H, D);
  LATTN_CUDA_CHECK_LAUNCH("dcp rescale_kernel");
}

void pack_rows(const Tensor& partial_out, const Tensor& own_lse, const Tensor& send, Stream stream) {
  const int64_t T = partial_out.size(0), H = partial_out.size(1), D = partial_out.size(2);
  if (H * T == 0) return;
  DeviceGuard guard(send.device().index);
  pack_rows_kernel<<<blocks_for(H * T * (D + 1)), kThreads, 0, as_cuda(stream)>>>(
      partial_out.data(), partial_out.dtype(), own_lse.data_as<const float>(), send.data_as<float>(), T, H, D);
  LATTN_CUDA_CHECK_LAUNCH("dcp pack_rows_kernel");
}

void merge_rows(const Tensor& recv, const Tensor& merged, const Tensor& lse, Stream stream) {
  const int W = int(recv.size(0));
  const int64_t rows = recv.size(1) * recv.size(2), D = recv.size(3) - 1;
  if (rows * D == 0) return;
  DeviceGuard guard(merged.device().index);
  merge_rows_kernel<<<blocks_for(rows * D), kThreads, 0, as_cuda(stream)>>>(
      recv.data_as<const float>(), W, merged.data_as<float>(), lse.data_as<float>(), rows, D);
  LATTN_CUDA_CHECK_LAUNCH("dcp merge_rows_kernel");
}

void finish(const Tensor& summed, const Tensor& lse, const Tensor& out, const Tensor& out_lse, Stream stream) {
  const int n = int(summed.size(0));
  const int64_t Ho = summed.size(1), T = summed.size(2), D = summed.size(3);
  if (Ho * T * D == 0) return;
  DeviceGuard guard(out.device().index);
  finish_kernel<<<blocks_for(Ho * T * D), kThreads, 0, as_cuda(stream)>>>(
      summed.data_as<const float>(), n, lse.data_as<const float>(), out.data(), out.dtype(),
      out_lse.defined() ? out_lse.data_as<float>() : nullptr, Ho, T, D);
  LATTN_CUDA_CHECK_LAUNCH("dcp finish_kernel");
}

void fill_neg_inf(const Tensor& lse, Stream stream) {
  const int64_t n = lse.numel();
  if (n == 0) return;
  DeviceGuard guard(lse.device().index);
  fill_neg_inf_kernel<<<blocks_for(n), kThreads, 0, as_cuda(stream)>>>(lse.data_as<float>(), n);
  LATTN_CUDA_CHECK_LAUNCH("dcp fill_neg_inf_kernel");
}

}  // namespace

const DcpKernels& dcp_cuda_kernels() {
  static const DcpKernels k{mask_lse, rescale, pack_rows, merge_rows, finish, fill_neg_inf};
  return k;
}

}  // namespace lattn::detail
