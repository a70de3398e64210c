// Plain CPU GEMM (see core/gemm.h): f32 accumulation, parallel over
// (batch, row). Correct for every dtype and stride combination; the fast
// path for large shapes is the CPU backend's concern.
#include <omp.h>

#include <vector>

#include "core/gemm.h"

namespace lattn::detail {

void cpu_gemm(const GemmProblem& p, const RunContext& ctx) {
  const int threads = ctx.num_threads > 0 ? ctx.num_threads : omp_get_max_threads();
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
  for (int64_t bt = 0; bt < p.batch; ++bt) {
    for (int64_t i = 0; i < p.m; ++i) {
      std::vector<float> arow(size_t(p.k));
      std::vector<float> acc(size_t(p.n), 0.f);
      const int64_t a_off = bt * p.batch_stride_a + i * p.lda;
      for (int64_t kk = 0; kk < p.k; ++kk) arow[size_t(kk)] = load_as_f32(p.a, p.a_dtype, a_off + kk);
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const float av = arow[size_t(kk)];
        if (av == 0.f) continue;
        for (int64_t j = 0; j < p.n; ++j) {
          const int64_t b_off = bt * p.batch_stride_b + (p.trans_b ? j * p.ldb + kk : kk * p.ldb + j);
          acc[size_t(j)] += av * load_as_f32(p.b, p.b_dtype, b_off);
        }
      }
      const int64_t c_off = bt * p.batch_stride_c + i * p.ldc;
      for (int64_t j = 0; j < p.n; ++j) {
        float v = p.alpha * acc[size_t(j)];
        if (p.beta != 0.f) v += p.beta * load_as_f32(p.c, p.c_dtype, c_off + j);
        store_from_f32(p.c, p.c_dtype, c_off + j, v);
      }
    }
  }
}

}  // namespace lattn::detail
