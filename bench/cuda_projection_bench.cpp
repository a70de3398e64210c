// The cost of the batch-invariant mode on the projections (docs/mla.md,
// "Batch invariance"): each MLA projection GEMM of the `lattn bench` shapes
// (DeepSeek dims, bf16) timed with cuBLAS (the default mode) and with the
// batch-invariant GEMM, in the same run, with the ratio, and the cuBLAS
// 8192^3 bf16 GEMM as the run's ceiling. Shapes (src/core/ops/gemm.h):
//   absorption  q_nope [T, N, P] . W_UK_T [N, P, L]   per head (batch N)
//   V up-proj   o [T, N, L] . W_UV [N, L, V]           per head (batch N)
//   kv_b_proj   kv_c [T, L] . W^T, W [N (P+V), L]      (trans_b; prefill)
// T: decode batches 1, 4, 64, 128 tokens; prefill 512, 2048, 4 x 2048 tokens.
// Prints one line per case: median µs of each mode, ratio, TFLOP/s.
#include <cstdio>
#include <functional>
#include <string>

#include "core/ops/gemm.h"
#include "cuda/common/runtime_utils.h"
#include "cuda_bench_timing.h"
#include "lattn/backend.h"
#include "lattn/device.h"
#include "lattn/tensor.h"

namespace lattn {
namespace {

const Device kGpu = Device::cuda(0);

// 3 warm-up runs, median of 21.
double median_us(Stream stream, const std::function<void()>& issue) {
  return bench_cuda::median_device_us(stream, 3, 21, issue);
}

struct Shape {
  std::string name;
  int64_t m, n, k, batch;
  bool trans_b;
};

void run_case(const Shape& s, Stream stream, double ceiling_tflops) {
  OwnedTensor a = OwnedTensor::empty({s.batch * s.m * s.k}, DType::bf16, kGpu);
  OwnedTensor b = OwnedTensor::empty({s.batch * s.k * s.n}, DType::bf16, kGpu);
  OwnedTensor c = OwnedTensor::empty({s.batch * s.m * s.n}, DType::bf16, kGpu);
  cuda::fill_random_device(a.data(), DType::bf16, a.tensor().numel(), 1, 1.f, stream);
  cuda::fill_random_device(b.data(), DType::bf16, b.tensor().numel(), 2, 1.f, stream);
  detail::GemmProblem p;
  p.m = s.m, p.n = s.n, p.k = s.k, p.batch = s.batch;
  // Heads interleaved in the rows as in the layer: row stride N * K, head stride K.
  p.a = a.data(), p.a_dtype = DType::bf16, p.lda = s.batch * s.k, p.batch_stride_a = s.k;
  p.b = b.data(), p.b_dtype = DType::bf16, p.ldb = s.trans_b ? s.k : s.n, p.batch_stride_b = s.k * s.n;
  p.trans_b = s.trans_b;
  p.c = c.data(), p.c_dtype = DType::bf16, p.ldc = s.batch * s.n, p.batch_stride_c = s.n;
  const double def = median_us(stream, [&] { detail::gemm(p, RunContext{kGpu, stream, 0, false}); });
  const double inv = median_us(stream, [&] { detail::gemm(p, RunContext{kGpu, stream, 0, true}); });
  const double flop = 2.0 * double(s.m) * double(s.n) * double(s.k) * double(s.batch);
  std::printf("%-34s %9.1f %9.1f %6.2fx %8.1f %8.1f %6.3f\n", s.name.c_str(), def, inv, inv / def,
              flop / (def * 1e-6) / 1e12, flop / (inv * 1e-6) / 1e12, flop / (inv * 1e-6) / 1e12 / ceiling_tflops);
}

}  // namespace
}  // namespace lattn

int main() {
  using namespace lattn;
  cuda::StreamHandle stream(0);
  const bench_cuda::Ceiling ceiling = bench_cuda::measure_gemm_ceiling(stream.get(), kGpu, false, 21);
  const bench_cuda::Ceiling invariant = bench_cuda::measure_gemm_ceiling(stream.get(), kGpu, true, 21);
  const double ceiling_tflops = ceiling.rate;
  std::printf("ceiling: cuBLAS bf16 8192^3 %.1f us = %.1f TFLOP/s; batch-invariant GEMM %.1f us = %.1f TFLOP/s\n",
              ceiling.us, ceiling.rate, invariant.us, invariant.rate);
  std::printf("%-34s %9s %9s %7s %8s %8s %6s\n", "case (bf16, DeepSeek dims)", "cuBLAS_us", "invar_us", "ratio",
              "cuBLAS_TF", "invar_TF", "frac");
  const int64_t P = 128, V = 128, L = 512;
  for (const int64_t heads : {int64_t(16), int64_t(128)}) {
    for (const int64_t t : {int64_t(1), int64_t(4), int64_t(64), int64_t(128)}) {
      const std::string tag = "H" + std::to_string(heads) + " T" + std::to_string(t);
      run_case({"decode absorb " + tag, t, L, P, heads, false}, stream.get(), ceiling_tflops);
      run_case({"decode W_UV " + tag, t, V, L, heads, false}, stream.get(), ceiling_tflops);
    }
    for (const int64_t t : {int64_t(512), int64_t(2048), int64_t(8192)}) {
      const std::string tag = "H" + std::to_string(heads) + " T" + std::to_string(t);
      run_case({"prefill kv_b_proj " + tag, t, heads * (P + V), L, 1, true}, stream.get(), ceiling_tflops);
    }
  }
  return 0;
}
