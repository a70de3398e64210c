// The Hopper PTX wrappers (src/cuda/sm90/common: mbarrier, TMA, wgmma
// descriptors and instructions) against host loops, one combination per test:
// a 3D TMA box with the 128-byte swizzle and an L2 hint (raw bytes checked
// against the swizzle formula), and D = A * B through wgmma with A from shared
// memory (K-major) or registers, B K-major or MN-major (transposed), for N =
// 32/64/128/256 and bf16/f16, on random data. Descriptor and swizzle mistakes
// show up as wrong products. Skips without an sm90 GPU (the kernels are sm_90a).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "lattn/device.h"
#include "lattn/dtype.h"
#include "sm90_wgmma_test_kernels.h"
#include "support/gpu.h"

namespace lattn {
namespace {

using test::sm90::WgmmaCase;

constexpr int kK = 128;

// Swizzled byte offset of (row, col) of a [rows][64] 16-bit box (128-byte swizzle).
size_t swizzle128(size_t row, size_t col) { return row * 128 + (((col / 8) ^ (row % 8)) * 16) + (col % 8) * 2; }

std::vector<uint16_t> random_values(size_t n, bool bf16, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = bf16 ? f32_to_bf16(dist(rng)) : f32_to_f16(dist(rng));
  return v;
}

float value(uint16_t bits, bool bf16) { return bf16 ? bf16_to_f32(bits) : f16_to_f32(bits); }

struct Case {
  WgmmaCase kind;
  int n;
  bool bf16;
};

std::string case_name(const Case& c) {
  const char* kinds[] = {"SsKMajorB", "SsMnMajorB", "RsKMajorB", "RsMnMajorB"};
  return std::string(kinds[int(c.kind)]) + "_N" + std::to_string(c.n) + (c.bf16 ? "_bf16" : "_f16");
}

class Sm90Wgmma : public ::testing::TestWithParam<Case> {};

TEST_P(Sm90Wgmma, MatchesHostProduct) {
  LATTN_REQUIRE_GPU();
  const Case c = GetParam();
  const bool mn = c.kind == WgmmaCase::kSsMnMajorB || c.kind == WgmmaCase::kRsMnMajorB;
  std::mt19937 rng(1234 + c.n + 7 * int(c.kind) + (c.bf16 ? 100 : 0));
  const std::vector<uint16_t> a = random_values(size_t(64) * kK, c.bf16, rng);
  const std::vector<uint16_t> b = random_values(size_t(c.n) * kK, c.bf16, rng);
  std::vector<float> d;
  std::vector<uint8_t> raw;
#ifdef LATTN_TEST_KERNELS
  if (!test::sm90::run_wgmma_case(c.kind, c.n, c.bf16, a, b, d, raw)) GTEST_SKIP() << "no sm90 GPU";
#else
  GTEST_SKIP() << "built without CUDA";
#endif

  // The A tile as TMA stored it: box (64 columns) after box, swizzled rows.
  int raw_bad = 0;
  for (int r = 0; r < 64; ++r) {
    for (int k = 0; k < kK; ++k) {
      uint16_t got;
      std::memcpy(&got, raw.data() + (k / 64) * 8192 + swizzle128(r, k % 64), 2);
      raw_bad += got != a[r * kK + k];
    }
  }
  EXPECT_EQ(raw_bad, 0) << "A's shared-memory tile is not the 128-byte swizzled layout";

  int bad = 0;
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < c.n; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < kK; ++k) {
        const double bv = value(mn ? b[size_t(k) * c.n + j] : b[size_t(j) * kK + k], c.bf16);
        const double p = double(value(a[i * kK + k], c.bf16)) * bv;
        ref += p;
        mag += std::fabs(p);
      }
      const float got = d[size_t(i) * c.n + j];
      if (!(std::fabs(got - ref) <= 1e-5 * mag + 1e-6)) {
        if (bad < 5) ADD_FAILURE() << "D[" << i << "][" << j << "] = " << got << ", expected " << ref;
        ++bad;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << 64 * c.n << " outputs";
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (WgmmaCase k : {WgmmaCase::kSsKMajorB, WgmmaCase::kSsMnMajorB, WgmmaCase::kRsKMajorB, WgmmaCase::kRsMnMajorB}) {
    const bool mn = k == WgmmaCase::kSsMnMajorB || k == WgmmaCase::kRsMnMajorB;
    for (int n : {32, 64, 128, 256}) {
      // MN-major B with the 128-byte swizzle comes in 64-wide n boxes.
      if (mn && n < 64) continue;
      for (bool bf16 : {true, false}) cases.push_back({k, n, bf16});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Wrappers, Sm90Wgmma, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// A box of the paged latent cache [blocks][block_size][576], as the decode
// kernel loads it: box {64 columns, 64 rows, 1 block} at an inner offset.
TEST(Sm90Tma, PagedBoxLandsSwizzled) {
  LATTN_REQUIRE_GPU();
  const int blocks = 4, block_size = 128;
  std::mt19937 rng(99);
  const std::vector<uint16_t> cache = random_values(size_t(blocks) * block_size * 576, true, rng);
  for (auto [col0, row0, block] : {std::tuple{192, 64, 2}, std::tuple{512, 0, 3}, std::tuple{0, 64, 0}}) {
    std::vector<uint8_t> out;
#ifdef LATTN_TEST_KERNELS
    if (!test::sm90::run_tma_3d_case(cache, blocks, block_size, col0, row0, block, out)) GTEST_SKIP() << "no sm90 GPU";
#else
    GTEST_SKIP() << "built without CUDA";
#endif
    int bad = 0;
    for (int r = 0; r < 64; ++r) {
      for (int k = 0; k < 64; ++k) {
        uint16_t got;
        std::memcpy(&got, out.data() + swizzle128(r, k), 2);
        bad += got != cache[(size_t(block) * block_size + row0 + r) * 576 + col0 + k];
      }
    }
    EXPECT_EQ(bad, 0) << "box at col " << col0 << " row " << row0 << " block " << block;
  }
}

}  // namespace
}  // namespace lattn
