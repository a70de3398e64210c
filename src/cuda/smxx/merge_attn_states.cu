// merge_attn_states on CUDA (arXiv:2501.01005 §2.2): combines two partial
// attention results by their LSE. Robust as the reference: +inf LSE (FA2's
// empty row) reads as -inf, a side with -inf contributes nothing, and both
// -inf give output 0 and LSE -inf. One thread per 8 output elements.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/device_ops.h"

namespace lattn::cuda {
namespace {

// A [T, N, D] tensor with a contiguous last dim, or an [N, T] LSE.
struct Rows3 {
  void* data;
  int64_t stride_t, stride_n;
  DType dtype;
};
struct Lse {
  float* data;  // may be nullptr (out_lse only)
  int64_t stride_n, stride_t;
};

struct MergeParams {
  Rows3 out, prefix, suffix;
  Lse out_lse, prefix_lse, suffix_lse;
  int T, N, D;
};

// Weights of the two sides for one row; also the merged LSE. A side is
// empty (not read) iff its LSE is -inf; a NaN LSE (the side attended to a
// NaN) makes the row NaN; a side whose weight underflows to 0 is still read,
// so 0 * NaN stays NaN as in the math (docs/mla.md, "NaN and inf").
struct MergeWeights {
  float wp, ws, lse;
  bool p_live, s_live;
};
__device__ __forceinline__ MergeWeights merge_weights(float p, float s) {
  const float inf = INFINITY;
  if (p == inf) p = -inf;  // FA2 reports an empty row as +inf
  if (s == inf) s = -inf;
  if (isnan(p) || isnan(s)) return {NAN, NAN, NAN, true, true};
  const bool p_live = p != -inf, s_live = s != -inf;
  if (!p_live && !s_live) return {0.f, 0.f, -inf, false, false};
  const float m = fmaxf(p, s);
  const float ep = expf(p - m), es = expf(s - m);  // exp(-inf) = 0
  const float sum = ep + es;
  return {ep / sum, es / sum, m + logf(sum), p_live, s_live};
}

// One merged element; an empty side adds nothing (not even 0 * its value).
// Both products are rounded before the sum (no FMA contraction), so the
// result does not depend on which side is the prefix: the batch-invariant
// chunk loop may merge a request's pieces in either role (docs/mla.md).
__device__ __forceinline__ float merge_one(const MergeWeights& w, float a, float b) {
  if (w.p_live && w.s_live) return __fadd_rn(__fmul_rn(a, w.wp), __fmul_rn(b, w.ws));
  if (w.p_live) return a * w.wp;
  return w.s_live ? b * w.ws : 0.f;
}

template <class T, bool kVec>
__global__ void merge_attn_states_kernel(MergeParams p) {
  const int chunks = kVec ? p.D / 8 : p.D;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t rows = int64_t(p.T) * p.N;
  if (idx >= rows * chunks) return;
  const int64_t row = idx / chunks;
  const int c = int(idx % chunks);
  const int t = int(row / p.N), n = int(row % p.N);
  const MergeWeights w = merge_weights(p.prefix_lse.data[n * p.prefix_lse.stride_n + t * p.prefix_lse.stride_t],
                                       p.suffix_lse.data[n * p.suffix_lse.stride_n + t * p.suffix_lse.stride_t]);
  const int64_t po = t * p.prefix.stride_t + n * p.prefix.stride_n;
  const int64_t so = t * p.suffix.stride_t + n * p.suffix.stride_n;
  const int64_t oo = t * p.out.stride_t + n * p.out.stride_n;
  if constexpr (kVec) {
    float a[8], b[8], o[8];
    load8(static_cast<const T*>(p.prefix.data) + po + c * 8, a);
    load8(static_cast<const T*>(p.suffix.data) + so + c * 8, b);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = merge_one(w, a[i], b[i]);
    store8(static_cast<T*>(p.out.data) + oo + c * 8, o);
  } else {
    const float a = load_f32(p.prefix.data, p.prefix.dtype, po + c);
    const float b = load_f32(p.suffix.data, p.suffix.dtype, so + c);
    store_f32(p.out.data, p.out.dtype, oo + c, merge_one(w, a, b));
  }
  if (c == 0 && p.out_lse.data) p.out_lse.data[n * p.out_lse.stride_n + t * p.out_lse.stride_t] = w.lse;
}

Rows3 rows_of(const Tensor& t) { return {t.data(), t.stride(0), t.stride(1), t.dtype()}; }
Lse lse_of(const Tensor& t) {
  if (!t.defined()) return {nullptr, 0, 0};
  return {t.data_as<float>(), t.stride(0), t.stride(1)};
}

}  // namespace
}  // namespace lattn::cuda

namespace lattn::cuda {

void merge_attn_states(const Tensor& out, const Tensor& out_lse, const Tensor& prefix_out, const Tensor& prefix_lse,
                       const Tensor& suffix_out, const Tensor& suffix_lse, Stream stream) {
  using namespace lattn::cuda;
  MergeParams p{};
  p.T = int(out.size(0));
  p.N = int(out.size(1));
  p.D = int(out.size(2));
  if (int64_t(p.T) * p.N * p.D == 0) return;
  DeviceGuard guard(out.device().index);
  p.out = rows_of(out);
  p.prefix = rows_of(prefix_out);
  p.suffix = rows_of(suffix_out);
  p.out_lse = lse_of(out_lse);
  p.prefix_lse = lse_of(prefix_lse);
  p.suffix_lse = lse_of(suffix_lse);

  const bool same_dtype = out.dtype() == prefix_out.dtype() && out.dtype() == suffix_out.dtype();
  const int es = out.element_size();
  auto row_aligned = [&](const Tensor& t) {
    return is_aligned(t.data(), 16) && (t.stride(0) * es) % 16 == 0 && (t.stride(1) * es) % 16 == 0;
  };
  const bool last_contiguous = out.stride(2) == 1 && prefix_out.stride(2) == 1 && suffix_out.stride(2) == 1;
  const bool vec = same_dtype && last_contiguous && p.D % 8 == 0 && row_aligned(out) && row_aligned(prefix_out) &&
                   row_aligned(suffix_out);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  constexpr int kThreads = 256;
  if (vec) {
    const int64_t work = int64_t(p.T) * p.N * (p.D / 8);
    const dim3 grid(unsigned((work + kThreads - 1) / kThreads));
    LATTN_DISPATCH_FLOAT_TYPES(out.dtype(), "merge_attn_states", "out",
                               [&] { merge_attn_states_kernel<T, true><<<grid, kThreads, 0, s>>>(p); });
  } else {
    if (!last_contiguous) {
      throw NotImplementedError("merge_attn_states: CUDA tensors need a contiguous last dim, got out " +
                                out.describe() + ", prefix_out " + prefix_out.describe() + ", suffix_out " +
                                suffix_out.describe());
    }
    const int64_t work = int64_t(p.T) * p.N * p.D;
    const dim3 grid(unsigned((work + kThreads - 1) / kThreads));
    merge_attn_states_kernel<float, false><<<grid, kThreads, 0, s>>>(p);
  }
  LATTN_CUDA_CHECK_LAUNCH("merge_attn_states_kernel");
}

}  // namespace lattn::cuda
