// The CUDA GEMM (cuBLAS, and the fallback kernel for mixed dtypes) against
// a float64 host loop of the same row-major batched strided problem; the
// same in batch-invariant mode (the fixed-tile tensor-core kernel for
// f16/bf16, the fallback for the rest), whose rows must also be bit-identical
// whatever the number of rows around them.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/ops/device_ops.h"
#include "core/ops/gemm.h"
#include "support/gpu.h"
#include "support/test_data.h"

namespace lattn {
namespace {

struct GemmCase {
  int64_t m, n, k, batch;
  DType a, b, c;
  bool trans_b;
  float beta;
  const char* what;
};

class CudaGemm : public ::testing::TestWithParam<GemmCase> {};

void check_against_float64(const GemmCase& g, bool batch_invariant) {
  std::mt19937_64 rng(21);
  // Padded leading dimensions and batch strides: A rows of k + 8, etc.
  const int64_t lda = g.k + 8, ldb = (g.trans_b ? g.k : g.n) + 8, ldc = g.n + 4;
  const int64_t sa = g.m * lda + 16, sb = (g.trans_b ? g.n : g.k) * ldb + 16, sc = g.m * ldc + 16;
  OwnedTensor a = OwnedTensor::empty({g.batch * sa}, g.a), b = OwnedTensor::empty({g.batch * sb}, g.b);
  OwnedTensor c = OwnedTensor::empty({g.batch * sc}, g.c);
  test::fill_normal(a.tensor(), rng);
  test::fill_normal(b.tensor(), rng);
  test::fill_normal(c.tensor(), rng);
  OwnedTensor ad = test::to_device(a.tensor()), bd = test::to_device(b.tensor()), cd = test::to_device(c.tensor());
  detail::GemmProblem p;
  p.m = g.m, p.n = g.n, p.k = g.k, p.batch = g.batch;
  p.a = ad.data(), p.a_dtype = g.a, p.lda = lda, p.batch_stride_a = sa;
  p.b = bd.data(), p.b_dtype = g.b, p.ldb = ldb, p.batch_stride_b = sb, p.trans_b = g.trans_b;
  p.c = cd.data(), p.c_dtype = g.c, p.ldc = ldc, p.batch_stride_c = sc;
  p.alpha = 0.75f, p.beta = g.beta;
  detail::gemm(p, RunContext{Device::cuda(0), nullptr, 0, batch_invariant});
  detail::cuda_device_ops().synchronize(nullptr);

  OwnedTensor want = OwnedTensor::empty({g.batch, g.m, g.n}, DType::f32);
  OwnedTensor got_all = test::to_host_f32(cd.tensor());
  OwnedTensor got = OwnedTensor::empty({g.batch, g.m, g.n}, DType::f32);
  for (int64_t bb = 0; bb < g.batch; ++bb) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double acc = 0;
        for (int64_t kk = 0; kk < g.k; ++kk) {
          const double x = load_as_f32(a.data(), g.a, bb * sa + i * lda + kk);
          const double y = load_as_f32(b.data(), g.b, bb * sb + (g.trans_b ? j * ldb + kk : kk * ldb + j));
          acc += x * y;
        }
        const int64_t ci = bb * sc + i * ldc + j;
        const double v = 0.75 * acc + g.beta * load_as_f32(c.data(), g.c, ci);
        want.data_as<float>()[(bb * g.m + i) * g.n + j] = float(v);
        got.data_as<float>()[(bb * g.m + i) * g.n + j] = got_all.data_as<float>()[ci];
      }
    }
  }
  const test::ErrorReport e = test::compare(got.tensor(), want.tensor());
  EXPECT_LE(e.rel_l2, test::rel_tolerance(g.c))
      << g.what << (batch_invariant ? " (batch-invariant)" : "") << ": " << e.str();
  EXPECT_EQ(e.nan_mismatches, 0);
}

TEST_P(CudaGemm, MatchesFloat64Loops) {
  LATTN_REQUIRE_GPU();
  check_against_float64(GetParam(), false);
}

TEST_P(CudaGemm, BatchInvariantMatchesFloat64Loops) {
  LATTN_REQUIRE_GPU();
  check_against_float64(GetParam(), true);
}

// Batch-invariant mode: rows [40, 43) of a 300-row problem are bit-identical
// to the same rows computed alone (m = 3) and inside 70 rows starting at
// another tile offset, bf16 and f16 (the tensor-core kernel), for the
// absorption shape (batched heads, the 64 x 64 tiles) and the kv_b_proj
// shape (trans_b, one batch; N >= 1024 takes the 128 x 128 tiles), with
// 16-byte copies and with element loads (K or N not a multiple of 8).
struct InvariantShape {
  int64_t n, k, batch;
  bool trans_b;
};

TEST(CudaGemmBatchInvariant, RowsDoNotDependOnTheOtherRows) {
  LATTN_REQUIRE_GPU();
  const InvariantShape shapes[] = {
      {136, 200, 3, false}, {136, 200, 1, true},   // 64 x 64 tiles, 16-byte copies
      {1100, 200, 1, true}, {1032, 96, 1, false},  // 128 x 128 tiles, 16-byte copies
      {37, 203, 3, false},  {1030, 45, 1, true},   // element loads
  };
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const InvariantShape& shape : shapes) {
      const int64_t M = 300, n = shape.n, k = shape.k, batch = shape.batch;
      const bool trans_b = shape.trans_b;
      std::mt19937_64 rng(5);
      OwnedTensor a = OwnedTensor::empty({batch, M, k}, dtype), b = OwnedTensor::empty({batch, k * n}, dtype);
      test::fill_normal(a.tensor(), rng);
      test::fill_normal(b.tensor(), rng);
      OwnedTensor ad = test::to_device(a.tensor()), bd = test::to_device(b.tensor());
      // Runs rows [first, first + m) of every batch into a fresh [batch, m, n] C; returns its bytes.
      const auto run = [&](int64_t first, int64_t m) {
        OwnedTensor cd = OwnedTensor::empty({batch, m, n}, dtype, Device::cuda(0));
        detail::GemmProblem p;
        p.m = m, p.n = n, p.k = k, p.batch = batch;
        p.a = static_cast<const char*>(ad.data()) + first * k * dtype_size(dtype), p.a_dtype = dtype;
        p.lda = k, p.batch_stride_a = M * k;
        p.b = bd.data(), p.b_dtype = dtype, p.ldb = trans_b ? k : n, p.batch_stride_b = k * n, p.trans_b = trans_b;
        p.c = cd.data(), p.c_dtype = dtype, p.ldc = n, p.batch_stride_c = m * n;
        detail::gemm(p, RunContext{Device::cuda(0), nullptr, 0, true});
        OwnedTensor host = OwnedTensor::empty({batch, m, n}, dtype);
        copy_tensor(cd.tensor(), host.tensor());
        return host;
      };
      const OwnedTensor all = run(0, M), alone = run(40, 3), shifted = run(7, 70);
      const size_t row_bytes = size_t(n) * dtype_size(dtype);
      for (int64_t bb = 0; bb < batch; ++bb) {
        for (int64_t r = 40; r < 43; ++r) {
          const auto* want = static_cast<const char*>(all.data()) + (bb * M + r) * row_bytes;
          const auto* got_alone = static_cast<const char*>(alone.data()) + (bb * 3 + r - 40) * row_bytes;
          const auto* got_shifted = static_cast<const char*>(shifted.data()) + (bb * 70 + r - 7) * row_bytes;
          EXPECT_EQ(std::memcmp(want, got_alone, row_bytes), 0)
              << dtype_name(dtype) << " n " << n << " k " << k << " trans_b " << trans_b << " batch " << bb << " row "
              << r << " (alone)";
          EXPECT_EQ(std::memcmp(want, got_shifted, row_bytes), 0)
              << dtype_name(dtype) << " n " << n << " k " << k << " trans_b " << trans_b << " batch " << bb << " row "
              << r << " (shifted)";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cuda, CudaGemm,
    ::testing::Values(
        GemmCase{37, 96, 128, 3, DType::bf16, DType::bf16, DType::bf16, false, 0.f, "absorption-like bf16"},
        GemmCase{33, 64, 512, 4, DType::f16, DType::f16, DType::f32, false, 0.5f, "f16 in, f32 out, beta"},
        GemmCase{29, 80, 64, 1, DType::bf16, DType::bf16, DType::bf16, true, 0.f, "kv_b_proj-like trans_b"},
        GemmCase{17, 23, 45, 2, DType::f32, DType::f32, DType::f32, true, 1.f, "f32"},
        GemmCase{19, 40, 72, 2, DType::bf16, DType::f32, DType::bf16, false, 0.25f, "mixed: fallback kernel"},
        GemmCase{5, 7, 0, 1, DType::bf16, DType::bf16, DType::f32, false, 2.f, "k = 0: C = beta C"},
        GemmCase{130, 200, 96, 2, DType::bf16, DType::bf16, DType::bf16, true, 0.f, "several 64-row tiles"},
        GemmCase{150, 1100, 72, 1, DType::bf16, DType::bf16, DType::bf16, true, 0.f, "128-wide tiles, trans_b"},
        GemmCase{70, 1030, 40, 1, DType::f16, DType::f16, DType::f32, false, 0.5f, "128-wide tiles, N % 8 != 0"},
        GemmCase{21, 50, 45, 2, DType::bf16, DType::bf16, DType::bf16, false, 0.f, "odd K: element loads"}),
    [](const ::testing::TestParamInfo<GemmCase>& info) {
      const GemmCase& g = info.param;
      return std::string(dtype_name(g.a)) + "x" + dtype_name(g.b) + "_to_" + dtype_name(g.c) + "_m" +
             std::to_string(g.m) + "n" + std::to_string(g.n) + "k" + std::to_string(g.k) + "b" +
             std::to_string(g.batch) + (g.trans_b ? "_transb" : "");
    });

}  // namespace
}  // namespace lattn
