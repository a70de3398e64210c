// detail::cpu_gemm against a float64 loop, on both implementations (the
// OpenBLAS f32 panels and the AVX512-BF16 kernel, forced in turn), every
// instruction-set path, 1 and all threads: the MLA projection shapes (per
// head batches, A shared by all heads, B given transposed, strided rows of
// C inside a wider tensor) and awkward ones (odd k, n not a multiple of 16,
// m below the register block, alpha/beta, k = 0).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/ops/gemm.h"
#include "cpu/gemm_paths.h"
#include "lattn/cpu.h"
#include "support/test_data.h"

namespace lattn {
namespace {

struct Shape {
  int64_t m, n, k, batch;
  bool trans_b;
  bool shared_a;  // batch_stride_a = 0
  int64_t c_pad;  // columns after each batch entry's n columns in C's rows
  float alpha, beta;
};

struct Types {
  DType a, b, c;
};

void check_gemm(const Shape& s, const Types& t, int threads, std::mt19937_64& rng) {
  const int64_t a_rows = s.shared_a ? s.m : s.m * s.batch;
  OwnedTensor a = OwnedTensor::empty({a_rows, s.k + 3}, t.a);  // rows padded: lda = k + 3
  OwnedTensor b = OwnedTensor::empty({s.batch, s.trans_b ? s.n : s.k, (s.trans_b ? s.k : s.n) + 1}, t.b);
  // C is [m, batch, n + pad]: each batch entry's columns inside wider rows (as out's head columns).
  OwnedTensor c = OwnedTensor::empty({s.m, s.batch, s.n + s.c_pad}, t.c);
  test::fill_uniform(a, rng);
  test::fill_uniform(b, rng);
  test::fill_uniform(c, rng);
  OwnedTensor c_before = test::to_host_f32(c);

  detail::GemmProblem p;
  p.m = s.m, p.n = s.n, p.k = s.k, p.batch = s.batch;
  p.a = a.data(), p.a_dtype = t.a, p.lda = s.k + 3, p.batch_stride_a = s.shared_a ? 0 : s.m * (s.k + 3);
  p.b = b.data(), p.b_dtype = t.b, p.ldb = (s.trans_b ? s.k : s.n) + 1;
  p.batch_stride_b = (s.trans_b ? s.n : s.k) * p.ldb;
  p.trans_b = s.trans_b;
  p.c = c.data(), p.c_dtype = t.c, p.ldc = s.batch * (s.n + s.c_pad), p.batch_stride_c = s.n + s.c_pad;
  p.alpha = s.alpha, p.beta = s.beta;
  RunContext ctx;
  ctx.num_threads = threads;
  detail::gemm(p, ctx);

  OwnedTensor af = test::to_host_f32(a), bf = test::to_host_f32(b);
  OwnedTensor ref = OwnedTensor::empty({s.m, s.batch, s.n + s.c_pad}, DType::f32);
  std::copy(c_before.data_as<float>(), c_before.data_as<float>() + c_before.tensor().numel(), ref.data_as<float>());
  for (int64_t bt = 0; bt < s.batch; ++bt) {
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0;
        for (int64_t kk = 0; kk < s.k; ++kk) {
          const double av = af.data_as<float>()[(s.shared_a ? i : bt * s.m + i) * (s.k + 3) + kk];
          const double bv = s.trans_b ? bf.data_as<float>()[(bt * s.n + j) * p.ldb + kk]
                                      : bf.data_as<float>()[(bt * s.k + kk) * p.ldb + j];
          acc += av * bv;
        }
        float& out = ref.data_as<float>()[(i * s.batch + bt) * (s.n + s.c_pad) + j];
        out = float(s.alpha * acc + s.beta * double(out));
      }
    }
  }
  const test::ErrorReport e = test::compare(c, ref);
  // f32 accumulation of exact products; the rounding of C to its dtype dominates.
  EXPECT_LE(e.rel_l2, test::rel_tolerance(t.c)) << e.str();
}

class CpuGemmTest : public ::testing::TestWithParam<std::tuple<CpuIsa, cpu::GemmPath, bool>> {
 protected:
  void SetUp() override {
    const auto [isa, path, all_threads] = GetParam();
    const auto supported = cpu_isas_supported();
    if (std::find(supported.begin(), supported.end(), isa) == supported.end()) {
      GTEST_SKIP() << "this CPU cannot run the " << cpu_isa_name(isa) << " path";
    }
    if (path == cpu::GemmPath::bf16_dot && isa != CpuIsa::avx512_bf16) {
      GTEST_SKIP() << "the bf16_dot GEMM needs the avx512bf16 path";
    }
    set_cpu_isa(isa);
    cpu::set_gemm_path(path);
    threads_ = all_threads ? std::max(2, omp_get_max_threads()) : 1;
  }
  void TearDown() override {
    set_cpu_isa(std::nullopt);
    cpu::set_gemm_path(cpu::GemmPath::automatic);
  }
  int threads_ = 1;
  std::mt19937_64 rng_{77};
};

// The bf16_dot path applies to bf16 A and B; the other type mixes always
// take OpenBLAS, so each is checked under both settings.
const Types kTypes[] = {{DType::bf16, DType::bf16, DType::bf16}, {DType::bf16, DType::bf16, DType::f32},
                        {DType::f32, DType::f32, DType::f32},    {DType::f16, DType::f16, DType::f16},
                        {DType::bf16, DType::bf16, DType::f16},  {DType::f32, DType::bf16, DType::bf16}};

TEST_P(CpuGemmTest, MlaProjectionShapes) {
  const Shape shapes[] = {
      {8, 512, 128, 4, false, false, 0, 1.f, 0.f},   // decode absorption: q_nope [Td, P] x W_UK_T [P, L] per head
      {8, 128, 512, 4, false, false, 16, 1.f, 0.f},  // decode V up-projection into out's head columns
      {70, 128, 512, 3, true, true, 64, 1.f, 0.f},   // prefill k_nope = kv_c x W_UK_T^T, one kv_c for all heads
      {70, 128, 512, 3, false, true, 0, 1.f, 0.f},   // prefill v = kv_c x W_UV
  };
  for (const Types& t : kTypes) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(dtype_name(t.a)) + "/" + dtype_name(t.b) + "->" + dtype_name(t.c) + " m" +
                   std::to_string(s.m) + " n" + std::to_string(s.n) + " k" + std::to_string(s.k));
      check_gemm(s, t, threads_, rng_);
    }
  }
}

TEST_P(CpuGemmTest, AwkwardShapesAlphaBeta) {
  const Shape shapes[] = {
      {5, 37, 19, 2, false, false, 3, 0.5f, 0.f},   // odd k, n not a multiple of 16, m below the block
      {13, 17, 33, 1, true, false, 0, 1.f, 2.f},    // beta accumulates into C
      {49, 70, 64, 2, true, true, 5, -1.5f, 0.5f},  // more rows than one work item
      {3, 5, 0, 2, false, false, 0, 1.f, 0.5f},     // k = 0: C = beta C
      {1, 1, 1, 1, false, false, 0, 1.f, 0.f},
  };
  for (const Types& t : kTypes) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(dtype_name(t.a)) + "/" + dtype_name(t.b) + "->" + dtype_name(t.c) + " m" +
                   std::to_string(s.m) + " n" + std::to_string(s.n) + " k" + std::to_string(s.k));
      check_gemm(s, t, threads_, rng_);
    }
  }
}

std::string gemm_case_name(const ::testing::TestParamInfo<std::tuple<CpuIsa, cpu::GemmPath, bool>>& info) {
  const auto [isa, path, all_threads] = info.param;
  return std::string(cpu_isa_name(isa)) + (path == cpu::GemmPath::openblas ? "_openblas" : "_bf16dot") +
         (all_threads ? "_all_threads" : "_1_thread");
}

INSTANTIATE_TEST_SUITE_P(
    Paths, CpuGemmTest,
    ::testing::Combine(::testing::Values(CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512, CpuIsa::avx512_bf16),
                       ::testing::Values(cpu::GemmPath::openblas, cpu::GemmPath::bf16_dot), ::testing::Bool()),
    gemm_case_name);

}  // namespace
}  // namespace lattn
