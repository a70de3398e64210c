// The OpenBLAS path of cpu_gemm (see gemm_paths.h): f32 panels and
// cblas_sgemm. Batches that are many small GEMMs (the per-head projections
// of a decode step) run one single-threaded sgemm per OpenMP thread; large
// ones run one at a time with OpenBLAS's own threads, so the two thread
// pools never compete.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "cpu/attention_kernels.h"
#include "cpu/gemm_paths.h"
#include "lattn/cpu.h"

namespace lattn::cpu {
namespace {

// Rows x cols of src (row stride ld, elements of dtype) as a dense f32
// panel [rows][cols]; f32 sources with unit column stride are used in place.
const float* f32_panel(const void* src, DType dtype, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& buf,
                       int64_t& ld_out) {
  if (dtype == DType::f32) {
    ld_out = ld;
    return static_cast<const float*>(src);
  }
  const KernelTable& kt = kernel_table(cpu_isa());
  buf.resize(size_t(rows * cols));
  const size_t esize = size_t(dtype_size(dtype));
  for (int64_t r = 0; r < rows; ++r) {
    kt.to_f32(static_cast<const char*>(src) + size_t(r * ld) * esize, dtype, cols, buf.data() + r * cols);
  }
  ld_out = cols;
  return buf.data();
}

// One batch entry: C_b = alpha A_b B_b + beta C_b.
void one_gemm(const detail::GemmProblem& p, int64_t b, std::vector<float>& abuf, std::vector<float>& bbuf,
              std::vector<float>& cbuf) {
  const KernelTable& kt = kernel_table(cpu_isa());
  const size_t ea = size_t(dtype_size(p.a_dtype)), eb = size_t(dtype_size(p.b_dtype)),
               ec = size_t(dtype_size(p.c_dtype));
  int64_t lda = 0, ldb = 0;
  const float* a = f32_panel(static_cast<const char*>(p.a) + size_t(b * p.batch_stride_a) * ea, p.a_dtype, p.m, p.k,
                             p.lda, abuf, lda);
  const float* bm = p.trans_b ? f32_panel(static_cast<const char*>(p.b) + size_t(b * p.batch_stride_b) * eb, p.b_dtype,
                                          p.n, p.k, p.ldb, bbuf, ldb)
                              : f32_panel(static_cast<const char*>(p.b) + size_t(b * p.batch_stride_b) * eb, p.b_dtype,
                                          p.k, p.n, p.ldb, bbuf, ldb);
  char* c = static_cast<char*>(p.c) + size_t(b * p.batch_stride_c) * ec;
  const CBLAS_TRANSPOSE tb = p.trans_b ? CblasTrans : CblasNoTrans;
  if (p.c_dtype == DType::f32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, blasint(p.m), blasint(p.n), blasint(p.k), p.alpha, a, blasint(lda), bm,
                blasint(ldb), p.beta, reinterpret_cast<float*>(c), blasint(p.ldc));
    return;
  }
  cbuf.resize(size_t(p.m * p.n));
  float beta = 0.f;
  if (p.beta != 0.f) {
    for (int64_t r = 0; r < p.m; ++r) kt.to_f32(c + size_t(r * p.ldc) * ec, p.c_dtype, p.n, cbuf.data() + r * p.n);
    beta = p.beta;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, blasint(p.m), blasint(p.n), blasint(p.k), p.alpha, a, blasint(lda), bm,
              blasint(ldb), beta, cbuf.data(), blasint(p.n));
  for (int64_t r = 0; r < p.m; ++r) kt.from_f32(cbuf.data() + r * p.n, p.n, p.c_dtype, c + size_t(r * p.ldc) * ec);
}

}  // namespace

void gemm_openblas(const detail::GemmProblem& problem, int threads) {
  // OpenBLAS's thread count is one process-wide setting, and
  // openblas_set_num_threads is not safe while another thread is inside a
  // threaded OpenBLAS call: two layers running on two threads would change
  // each other's setting mid-GEMM. GEMMs through OpenBLAS therefore run one
  // at a time (each still uses every thread it is given).
  static std::mutex openblas_mutex;
  const std::lock_guard<std::mutex> lock(openblas_mutex);
  detail::GemmProblem p = problem;
  // An A shared by every batch entry (the prefill up-projections: one latent
  // for all heads) is converted once, not once per head.
  std::vector<float> shared_a;
  if (p.batch > 1 && p.batch_stride_a == 0 && p.a_dtype != DType::f32) {
    const KernelTable& kt = kernel_table(cpu_isa());
    shared_a.resize(size_t(p.m * p.k));
    const size_t ea = size_t(dtype_size(p.a_dtype));
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < p.m; ++r) {
      kt.to_f32(static_cast<const char*>(p.a) + size_t(r * p.lda) * ea, p.a_dtype, p.k, shared_a.data() + r * p.k);
    }
    p.a = shared_a.data();
    p.a_dtype = DType::f32;
    p.lda = p.k;
  }
  // A batch of small GEMMs: OpenMP over the batch, OpenBLAS single-threaded.
  const double flops_each = 2.0 * double(p.m) * double(p.n) * double(p.k);
  const bool batch_parallel = p.batch >= threads && threads > 1 && flops_each < 64e6;
  const int previous = openblas_get_num_threads();
  if (batch_parallel) {
    openblas_set_num_threads(1);
#pragma omp parallel num_threads(threads)
    {
      std::vector<float> abuf, bbuf, cbuf;
#pragma omp for schedule(static)
      for (int64_t b = 0; b < p.batch; ++b) one_gemm(p, b, abuf, bbuf, cbuf);
    }
  } else {
    openblas_set_num_threads(threads);
    std::vector<float> abuf, bbuf, cbuf;
    for (int64_t b = 0; b < p.batch; ++b) one_gemm(p, b, abuf, bbuf, cbuf);
  }
  openblas_set_num_threads(previous);
}

}  // namespace lattn::cpu
