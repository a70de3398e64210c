// The fixed-order path of cpu_gemm (see gemm_paths.h): the batch-invariant
// mode's GEMM when the bf16_dot kernel does not apply. OpenBLAS chooses its
// kernels and blockings by shape (small-matrix paths, GEMV for one row), so a
// row's bits there depend on how many rows come with it; here every output is
//   C(m, n) = alpha * sum_k A(m, k) B(k, n) (+ beta C), k ascending, in f32,
// the same loop whatever M, the thread count or the row's position.
#include <omp.h>

#include <vector>

#include "cpu/attention_kernels.h"
#include "cpu/gemm_paths.h"
#include "lattn/cpu.h"

namespace lattn::cpu {

void gemm_fixed_order(const detail::GemmProblem& p, int threads) {
  const KernelTable& kt = kernel_table(cpu_isa());
  const int64_t M = p.m, N = p.n, K = p.k;
  const size_t ea = size_t(dtype_size(p.a_dtype)), eb = size_t(dtype_size(p.b_dtype)),
               ec = size_t(dtype_size(p.c_dtype));
  // B of every batch entry as f32 [K][N].
  std::vector<float> bf(static_cast<size_t>(p.batch * K * N));
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> line(static_cast<size_t>(K > N ? K : N));
#pragma omp for schedule(static)
    for (int64_t bn = 0; bn < p.batch * (p.trans_b ? N : K); ++bn) {
      const int64_t b = bn / (p.trans_b ? N : K), i = bn % (p.trans_b ? N : K);
      const char* base = static_cast<const char*>(p.b) + size_t(b * p.batch_stride_b + i * p.ldb) * eb;
      float* dst = bf.data() + size_t(b * K * N);
      if (p.trans_b) {  // row i of the given [N, K] is column i of B
        kt.to_f32(base, p.b_dtype, K, line.data());
        for (int64_t k = 0; k < K; ++k) dst[k * N + i] = line[size_t(k)];
      } else {
        kt.to_f32(base, p.b_dtype, N, dst + i * N);
      }
    }
    std::vector<float> arow(static_cast<size_t>(K)), acc(static_cast<size_t>(N)), crow(static_cast<size_t>(N));
#pragma omp for schedule(static)
    for (int64_t bm = 0; bm < p.batch * M; ++bm) {
      const int64_t b = bm / M, m = bm % M;
      kt.to_f32(static_cast<const char*>(p.a) + size_t(b * p.batch_stride_a + m * p.lda) * ea, p.a_dtype, K,
                arow.data());
      const float* bb = bf.data() + size_t(b * K * N);
      for (int64_t n = 0; n < N; ++n) acc[size_t(n)] = 0.f;
      for (int64_t k = 0; k < K; ++k) {
        const float a = arow[size_t(k)];
        const float* brow = bb + k * N;
        for (int64_t n = 0; n < N; ++n) acc[size_t(n)] += a * brow[n];
      }
      char* c = static_cast<char*>(p.c) + size_t(b * p.batch_stride_c + m * p.ldc) * ec;
      if (p.beta != 0.f) kt.to_f32(c, p.c_dtype, N, crow.data());
      for (int64_t n = 0; n < N; ++n) {
        acc[size_t(n)] = p.alpha * acc[size_t(n)] + (p.beta != 0.f ? p.beta * crow[size_t(n)] : 0.f);
      }
      kt.from_f32(acc.data(), N, p.c_dtype, c);
    }
  }
}

}  // namespace lattn::cpu
