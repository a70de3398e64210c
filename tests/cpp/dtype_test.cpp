// DType conversions, checked exhaustively against independent formulas:
// decoding via ldexp from the bit fields, encoding via a brute-force search
// for the nearest representable value (ties to the even code).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "lattn/dtype.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

// Independent decoder of a binary float format with `eb` exponent bits and
// `mb` mantissa bits (IEEE-like; `ieee_special` = top exponent is inf/NaN).
double decode_formula(uint32_t bits, int eb, int mb, bool ieee_special, bool e4m3fn) {
  const uint32_t sign = (bits >> (eb + mb)) & 1u;
  const uint32_t exp = (bits >> mb) & ((1u << eb) - 1);
  const uint32_t mant = bits & ((1u << mb) - 1);
  const int bias = (1 << (eb - 1)) - 1;
  double v;
  if (ieee_special && exp == (1u << eb) - 1) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (e4m3fn && exp == 15 && mant == 7) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(double(mant), 1 - bias - mb);
  } else {
    v = std::ldexp(double(mant + (1u << mb)), int(exp) - bias - mb);
  }
  return sign ? -v : v;
}

TEST(DType, F16DecodeAll65536) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const double want = decode_formula(b, 5, 10, true, false);
    const float got = f16_to_f32(uint16_t(b));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << b;
    } else {
      ASSERT_EQ(double(got), want) << "bits " << b;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << b;
    }
  }
}

TEST(DType, Bf16DecodeAll65536) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const double want = decode_formula(b, 8, 7, true, false);
    const float got = bf16_to_f32(uint16_t(b));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << b;
    } else {
      ASSERT_EQ(double(got), want) << "bits " << b;
    }
  }
}

TEST(DType, Fp8E4m3DecodeAll256) {
  for (uint32_t b = 0; b < 256; ++b) {
    const double want = decode_formula(b, 4, 3, false, true);
    const float got = fp8e4m3_to_f32(uint8_t(b));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << b;
      ASSERT_TRUE(b == 0x7f || b == 0xff) << b;
    } else {
      ASSERT_EQ(double(got), want) << "bits " << b;
    }
  }
  EXPECT_EQ(fp8e4m3_to_f32(0x7e), 448.f);
  EXPECT_EQ(fp8e4m3_to_f32(0x01), std::ldexp(1.f, -9));
}

// Nearest finite code of a format by brute force, ties to even code
// (even mantissa LSB), with the format's overflow rule applied by the caller.
struct FormatTable {
  std::vector<std::pair<double, uint32_t>> finite_positive;  // (value, code) sorted, includes +0
};

FormatTable make_table(int eb, int mb, bool ieee, bool e4m3fn) {
  FormatTable t;
  const uint32_t n = 1u << (eb + mb);
  for (uint32_t b = 0; b < n; ++b) {
    const double v = decode_formula(b, eb, mb, ieee, e4m3fn);
    if (std::isfinite(v)) t.finite_positive.push_back({v, b});
  }
  std::sort(t.finite_positive.begin(), t.finite_positive.end());
  return t;
}

// Returns the code (without sign) nearest to |x|; `max_tie_up` = value at
// which rounding overflows to the next (virtual) binade.
uint32_t nearest_code(const FormatTable& t, double ax) {
  auto it = std::lower_bound(t.finite_positive.begin(), t.finite_positive.end(), std::make_pair(ax, 0u));
  if (it == t.finite_positive.end()) return t.finite_positive.back().second;
  if (it->first == ax || it == t.finite_positive.begin()) return it->second;
  auto lo = std::prev(it);
  const double dl = ax - lo->first, dh = it->first - ax;
  if (dl < dh) return lo->second;
  if (dh < dl) return it->second;
  return (lo->second & 1u) == 0 ? lo->second : it->second;
}

// Every f32 that is a bf16 value, plus the midpoints between consecutive
// bf16 values and their neighbours: covers all rounding cases of the narrower formats.
std::vector<float> probe_values() {
  std::vector<float> v;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint32_t u = b << 16;
    for (uint32_t lowbits : {0u, 0x8000u, 0x7fffu, 0x8001u, 0x1234u}) {
      float f;
      const uint32_t w = u | lowbits;
      std::memcpy(&f, &w, 4);
      v.push_back(f);
    }
  }
  return v;
}

TEST(DType, F16EncodeMatchesNearest) {
  const FormatTable t = make_table(5, 10, true, false);
  const double max_finite = 65504.0, overflow_at = 65520.0;
  for (float f : probe_values()) {
    const uint16_t got = f32_to_f16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(f16_to_f32(got)));
      continue;
    }
    const double ax = std::fabs(double(f));
    const uint32_t sign = std::signbit(f) ? 0x8000u : 0u;
    uint32_t want;
    if (ax >= overflow_at) {
      want = sign | 0x7c00u;  // inf
    } else {
      want = sign | nearest_code(t, std::min(ax, max_finite));
    }
    ASSERT_EQ(got, want) << "f=" << f;
  }
}

TEST(DType, Bf16EncodeMatchesNearest) {
  // bf16 shares f32's exponent range: check rounding of the low 16 bits.
  for (float f : probe_values()) {
    const uint16_t got = f32_to_bf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(got)));
      continue;
    }
    const uint32_t u = f32_bits(f);
    const uint32_t lo = u & 0xffffu, hi = u >> 16;
    uint32_t want = hi;
    if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) want = hi + 1;  // may carry into inf: correct RNE
    ASSERT_EQ(got, uint16_t(want)) << "f=" << f;
  }
}

TEST(DType, Fp8E4m3EncodeMatchesNearestSaturating) {
  const FormatTable t = make_table(4, 3, false, true);
  for (float f : probe_values()) {
    const uint8_t got = f32_to_fp8e4m3(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(got == 0x7f || got == 0xff) << int(got);
      continue;
    }
    const double ax = std::fabs(double(f));
    const uint32_t sign = std::signbit(f) ? 0x80u : 0u;
    const uint32_t want = sign | nearest_code(t, std::min(ax, 448.0));  // saturating
    ASSERT_EQ(got, want) << "f=" << f;
  }
  EXPECT_EQ(f32_to_fp8e4m3(1e9f), 0x7e);
  EXPECT_EQ(f32_to_fp8e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_fp8e4m3(464.f), 0x7e);
}

TEST(DType, RoundTripOfEveryCode) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = f16_to_f32(uint16_t(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_f16(f), b);
    }
    const float g = bf16_to_f32(uint16_t(b));
    if (!std::isnan(g)) {
      ASSERT_EQ(f32_to_bf16(g), b);
    }
  }
  for (uint32_t b = 0; b < 256; ++b) {
    const float f = fp8e4m3_to_f32(uint8_t(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_fp8e4m3(f), b);
    }
  }
}

TEST(DType, NamesAndParsing) {
  EXPECT_STREQ(dtype_torch_name(DType::f32), "torch.float32");
  EXPECT_STREQ(dtype_torch_name(DType::bf16), "torch.bfloat16");
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("torch.bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp8"), DType::fp8_e4m3);
  EXPECT_THROW(parse_dtype("fp4"), ValueError);
  EXPECT_EQ(dtype_size(DType::fp8_e4m3), 1);
}

}  // namespace
}  // namespace lattn
