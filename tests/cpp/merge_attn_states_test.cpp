// merge_attn_states (docs/mla.md): the LSE merge of two partial
// attention results, with the robust rules for empty sides.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "lattn/errors.h"
#include "lattn/ops.h"
#include "support/test_data.h"

namespace lattn {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// One token, one head, D elements per side.
struct MergeCase {
  std::vector<float> prefix, suffix;
  float prefix_lse, suffix_lse;
};

struct Merged {
  std::vector<float> out;
  float lse;
};

Merged merge_one(const MergeCase& c, DType dtype = DType::f32) {
  const int64_t D = int64_t(c.prefix.size());
  OwnedTensor p = OwnedTensor::empty({1, 1, D}, dtype), s = OwnedTensor::empty({1, 1, D}, dtype),
              o = OwnedTensor::empty({1, 1, D}, dtype);
  OwnedTensor pl = OwnedTensor::empty({1, 1}, DType::f32), sl = OwnedTensor::empty({1, 1}, DType::f32),
              ol = OwnedTensor::empty({1, 1}, DType::f32);
  for (int64_t d = 0; d < D; ++d) {
    store_from_f32(p.data(), dtype, d, c.prefix[size_t(d)]);
    store_from_f32(s.data(), dtype, d, c.suffix[size_t(d)]);
  }
  *pl.data_as<float>() = c.prefix_lse;
  *sl.data_as<float>() = c.suffix_lse;
  test::poison(o);
  test::poison(ol);
  merge_attn_states(o, ol, p, pl, s, sl);
  Merged m{std::vector<float>(size_t(D)), *ol.data_as<float>()};
  for (int64_t d = 0; d < D; ++d) m.out[size_t(d)] = load_as_f32(o.data(), dtype, d);
  return m;
}

TEST(TV_MERGE, WeightsBothSidesByTheirLse) {
  const Merged m = merge_one({{1, 2}, {5, -2}, 0.f, std::log(3.f)});
  EXPECT_NEAR(m.out[0], 4.0f, 1e-6f);
  EXPECT_NEAR(m.out[1], -1.0f, 1e-6f);
  EXPECT_NEAR(m.lse, 1.3862944f, 1e-6f);  // ln 4
}

TEST(TV_MERGE, PlusInfinityIsAnEmptySide) {
  // FA2 reports an empty row with LSE +inf: the suffix alone survives.
  const Merged m = merge_one({{1, 2}, {5, -2}, kInf, 0.5f});
  EXPECT_EQ(m.out[0], 5.f);
  EXPECT_EQ(m.out[1], -2.f);
  EXPECT_FLOAT_EQ(m.lse, 0.5f);
  const Merged n = merge_one({{1, 2}, {5, -2}, 0.25f, kInf});
  EXPECT_EQ(n.out[0], 1.f);
  EXPECT_FLOAT_EQ(n.lse, 0.25f);
}

TEST(TV_MERGE, MinusInfinitySideContributesNothingEvenIfItHoldsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Merged m = merge_one({{nan, nan}, {5, -2}, -kInf, 1.5f});
  EXPECT_EQ(m.out[0], 5.f);
  EXPECT_EQ(m.out[1], -2.f);
  EXPECT_FLOAT_EQ(m.lse, 1.5f);
}

TEST(TV_MERGE, BothEmptyGivesZeroAndMinusInfinity) {
  for (const auto& [p, s] : {std::pair{-kInf, -kInf}, std::pair{kInf, -kInf}, std::pair{kInf, kInf}}) {
    const Merged m = merge_one({{1, 2}, {5, -2}, p, s});
    EXPECT_EQ(m.out[0], 0.f);
    EXPECT_EQ(m.out[1], 0.f);
    EXPECT_EQ(m.lse, -kInf);
  }
}

TEST(MergeNonFinite, NanLseOrNanValuesOfALiveSideGiveNan) {
  // docs/mla.md, "NaN and inf": a side that attended to a NaN (NaN LSE, NaN
  // values) makes the row NaN, even against an empty other side; a live side
  // whose weight underflows is still read (0 * NaN is NaN).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto& [p, s] :
       {std::pair{nan, 0.5f}, std::pair{0.5f, nan}, std::pair{nan, -kInf}, std::pair{-kInf, nan}}) {
    const Merged m = merge_one({{nan, nan}, {nan, nan}, p, s});
    EXPECT_TRUE(std::isnan(m.out[0]) && std::isnan(m.out[1]) && std::isnan(m.lse)) << p << " " << s;
  }
  const Merged tiny = merge_one({{nan, 1}, {5, -2}, -200.f, 0.f});  // prefix weight e^-200 underflows to 0
  EXPECT_TRUE(std::isnan(tiny.out[0]));
  EXPECT_EQ(tiny.out[1], -2.f);
}

TEST(TV_MERGE, LargeLseDoesNotOverflow) {
  const Merged m = merge_one({{1, 1}, {3, 3}, 1000.f, 1000.f});
  EXPECT_FLOAT_EQ(m.out[0], 2.f);
  EXPECT_NEAR(m.lse, 1000.f + std::log(2.f), 1e-3f);
}

// Merging a split of a softmax gives the unsplit softmax: the property the
// chunked-context prefill relies on; checked on random data, several heads
// and tokens, strided LSE, in every output dtype, and with out aliasing prefix.
TEST(MergeAttnStates, ReassemblesASplitSoftmax) {
  std::mt19937_64 rng(7);
  const int64_t T = 5, N = 3, D = 8, K = 12;  // K keys, split at 5
  std::normal_distribution<double> normal;
  std::vector<double> scores(size_t(T * N * K)), values(size_t(K * D));
  for (double& x : scores) x = 2 * normal(rng);
  for (double& x : values) x = normal(rng);
  // Attention over keys [a, b) for every (t, n): output [T, N, D] and LSE [N, T].
  auto attend = [&](int64_t a, int64_t b, std::vector<double>& out, std::vector<double>& lse) {
    out.assign(size_t(T * N * D), 0);
    lse.assign(size_t(N * T), 0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double total = 0;
        for (int64_t j = a; j < b; ++j) total += std::exp(scores[size_t((t * N + n) * K + j)]);
        for (int64_t j = a; j < b; ++j)
          for (int64_t d = 0; d < D; ++d)
            out[size_t((t * N + n) * D + d)] +=
                std::exp(scores[size_t((t * N + n) * K + j)]) / total * values[size_t(j * D + d)];
        lse[size_t(n * T + t)] = std::log(total);
      }
  };
  std::vector<double> full_o, full_l, p_o, p_l, s_o, s_l;
  attend(0, K, full_o, full_l);
  attend(0, 5, p_o, p_l);
  attend(5, K, s_o, s_l);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    OwnedTensor prefix = OwnedTensor::empty({T, N, D}, dtype), suffix = OwnedTensor::empty({T, N, D}, dtype);
    // LSEs as [N, T] views with a row stride of T + 3 (strided is allowed).
    OwnedTensor p_lse_storage = OwnedTensor::empty({N, T + 3}, DType::f32);
    OwnedTensor s_lse = OwnedTensor::empty({N, T}, DType::f32), out_lse = OwnedTensor::empty({N, T}, DType::f32);
    const Tensor p_lse = p_lse_storage.tensor().narrow(1, 0, T);
    for (size_t i = 0; i < p_o.size(); ++i) {
      store_from_f32(prefix.data(), dtype, int64_t(i), float(p_o[i]));
      store_from_f32(suffix.data(), dtype, int64_t(i), float(s_o[i]));
    }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t t = 0; t < T; ++t) {
        p_lse.data_as<float>()[n * p_lse.stride(0) + t] = float(p_l[size_t(n * T + t)]);
        s_lse.data_as<float>()[n * T + t] = float(s_l[size_t(n * T + t)]);
      }
    test::poison(out_lse);
    merge_attn_states(prefix, out_lse, prefix, p_lse, suffix, s_lse);  // out aliases prefix
    OwnedTensor expected = OwnedTensor::empty({T, N, D}, DType::f32);
    for (size_t i = 0; i < full_o.size(); ++i) expected.data_as<float>()[i] = float(full_o[i]);
    const test::ErrorReport r = test::compare(prefix, expected);
    EXPECT_LE(r.rel_l2, test::rel_tolerance(dtype)) << dtype_name(dtype) << ": " << r.str();
    for (int64_t i = 0; i < N * T; ++i) EXPECT_NEAR(out_lse.data_as<float>()[i], full_l[size_t(i)], 1e-5);
  }
}

TEST(MergeAttnStates, RefusesMismatchedArguments) {
  OwnedTensor a = OwnedTensor::zeros({2, 3, 4}, DType::f32), b = OwnedTensor::zeros({2, 3, 4}, DType::f32),
              o = OwnedTensor::zeros({2, 3, 4}, DType::f32);
  OwnedTensor la = OwnedTensor::zeros({3, 2}, DType::f32), lb = OwnedTensor::zeros({3, 2}, DType::f32);
  OwnedTensor wrong_shape = OwnedTensor::zeros({2, 3, 5}, DType::f32);
  OwnedTensor wrong_lse = OwnedTensor::zeros({2, 3}, DType::f32);  // [T, N] instead of [N, T]
  OwnedTensor lse_f16 = OwnedTensor::zeros({3, 2}, DType::f16);
  EXPECT_THROW(merge_attn_states(o, Tensor(), wrong_shape, la, b, lb), ValueError);
  EXPECT_THROW(merge_attn_states(o, Tensor(), a, wrong_lse, b, lb), ValueError);
  EXPECT_THROW(merge_attn_states(o, Tensor(), a, la, b, lse_f16), ValueError);
  EXPECT_THROW(merge_attn_states(o, la, a, la, b, lb), ValueError);  // out_lse aliases prefix_lse
  try {
    merge_attn_states(o, Tensor(), a, la, wrong_shape, lb);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("suffix_output"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lattn
