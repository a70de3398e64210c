// The fp8_ds_mla latent format (lattn/sparse.h, docs/mla.md): the codec's
// rounding, saturation, zero tiles and NaN; the byte layout; the cache write
// and gather through the public ops on the host (and on a GPU where there is
// one, bit-identical to the host); dense decode backends refusing it.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "lattn/backend.h"
#include "lattn/errors.h"
#include "lattn/ops.h"
#include "lattn/registry.h"
#include "lattn/sparse.h"
#include "support/backend_driver.h"
#include "support/error_text.h"
#include "support/gpu.h"
#include "support/test_data.h"

namespace lattn {
namespace {

constexpr int L = 512, R = 64;

float scale_of(const std::vector<uint8_t>& e, int tile) {
  float s;
  std::memcpy(&s, e.data() + L + 4 * tile, 4);
  return s;
}

TEST(Fp8DsMla, EntryIs656BytesWithTheDocumentedLayout) {
  EXPECT_EQ(fp8_ds_mla_entry_bytes(512, 64), 656);
  std::vector<float> lat(L), rope(R);
  for (int i = 0; i < L; ++i) lat[i] = float(i % 128) - 64.f;  // amax 64 in every tile
  for (int i = 0; i < R; ++i) rope[i] = bf16_to_f32(f32_to_bf16(0.37f * float(i) - 5.f));
  std::vector<uint8_t> e(656, 0xAB);
  fp8_ds_mla_encode(lat.data(), rope.data(), L, R, e.data());
  for (int t = 0; t < 4; ++t) EXPECT_EQ(scale_of(e, t), 64.f / 448.f) << "tile " << t;
  // The element -64 (index 0 of each tile) is the tile's amax: -448 = 0xfe.
  for (int t = 0; t < 4; ++t) EXPECT_EQ(e[t * 128], 0xfe);
  for (int i = 0; i < R; ++i) {  // bytes [528, 656): the rope part, bf16 bit copies
    uint16_t b;
    std::memcpy(&b, e.data() + 528 + 2 * i, 2);
    EXPECT_EQ(b, f32_to_bf16(rope[i])) << i;
  }
}

TEST(Fp8DsMla, RoundingStaysWithinHalfAnFp8UlpOfEveryElement) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<float> lat(L), rope(R, 0.f), back(L + R);
    for (float& x : lat) x = nd(rng) * (rep % 5 == 0 ? 1e-6f : 1.f);
    std::vector<uint8_t> e(656);
    fp8_ds_mla_encode(lat.data(), rope.data(), L, R, e.data());
    fp8_ds_mla_decode(e.data(), L, R, back.data());
    for (int t = 0; t < 4; ++t) {
      float amax = 0;
      for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(lat[t * 128 + i]));
      const float s = scale_of(e, t);
      ASSERT_EQ(s, amax / 448.f);
      for (int i = t * 128; i < (t + 1) * 128; ++i) {
        // e4m3: 3 mantissa bits (half ulp 2^-4 relative) and subnormal spacing 2^-9 (half 2^-10), times the scale.
        const double bound = std::fabs(double(lat[i])) * 0.0625 + double(s) * std::ldexp(1.0, -10);
        ASSERT_LE(std::fabs(double(back[i]) - double(lat[i])), bound * (1 + 1e-6)) << "element " << i;
        ASSERT_EQ(e[i], f32_to_fp8e4m3(lat[i] / s)) << "element " << i;  // the defining formula, bit for bit
      }
    }
  }
}

TEST(Fp8DsMla, InfinitySaturatesZeroTilesStayZeroNanStaysNan) {
  std::vector<float> lat(L, 0.f), rope(R, 1.f), back(L + R);
  // tile 0: all zero; tile 1: one +inf, one -inf and finite values up to 2;
  // tile 2: a NaN among finite values; tile 3: all NaN.
  for (int i = 128; i < 256; ++i) lat[i] = float(i - 192) / 32.f;  // [-2, 2)
  lat[130] = INFINITY;
  lat[131] = -INFINITY;
  for (int i = 256; i < 384; ++i) lat[i] = float(i - 320) / 64.f;
  lat[300] = NAN;
  for (int i = 384; i < 512; ++i) lat[i] = NAN;
  std::vector<uint8_t> e(656);
  fp8_ds_mla_encode(lat.data(), rope.data(), L, R, e.data());
  fp8_ds_mla_decode(e.data(), L, R, back.data());

  EXPECT_EQ(scale_of(e, 0), FLT_MIN);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(back[i], 0.f) << i;
  EXPECT_EQ(scale_of(e, 1), 2.f / 448.f);  // infinities ignored by amax
  EXPECT_EQ(e[130], 0x7e);                 // +448
  EXPECT_EQ(e[131], 0xfe);                 // -448
  EXPECT_FLOAT_EQ(back[130], 2.f);
  EXPECT_FLOAT_EQ(back[131], -2.f);
  EXPECT_EQ(scale_of(e, 2), 1.f / 448.f);  // NaN ignored by amax
  EXPECT_TRUE(std::isnan(back[300]));
  for (int i = 256; i < 384; ++i) {
    if (i != 300) {
      EXPECT_FALSE(std::isnan(back[i])) << i;
    }
  }
  EXPECT_EQ(scale_of(e, 3), FLT_MIN);
  for (int i = 384; i < 512; ++i) EXPECT_TRUE(std::isnan(back[i])) << i;
  for (int i = 0; i < R; ++i) EXPECT_EQ(back[L + i], 1.f);
}

TEST(Fp8DsMla, ValidateRefusesWrongWidthAndUnalignedLatent) {
  OwnedTensor bad = OwnedTensor::empty({2, 4, 576}, DType::u8);
  const LatentCache c{bad.tensor(), 512, 64, 1.f};
  EXPECT_NE(test::error_text<ValueError>([&] { c.validate("op"); }).find("656 bytes"), std::string::npos);
  OwnedTensor odd = OwnedTensor::empty({2, 4, 64 + 0 + 2 * 32}, DType::u8);
  const LatentCache c2{odd.tensor(), 64, 32, 1.f};
  EXPECT_NE(test::error_text<ValueError>([&] { c2.validate("op"); }).find("multiple of 128"), std::string::npos);
}

struct WriteCase {
  OwnedTensor kv_c, k_pe, slots;
};

WriteCase make_write_case(int T, int64_t capacity, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  WriteCase w{OwnedTensor::empty({T, L}, dtype), OwnedTensor::empty({T, R}, dtype),
              OwnedTensor::empty({T}, DType::i64)};
  test::fill_normal(w.kv_c, rng, 2.f);
  test::fill_normal(w.k_pe, rng, 1.f);
  std::vector<int64_t> perm(static_cast<size_t>(capacity));
  for (int64_t i = 0; i < capacity; ++i) perm[size_t(i)] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int t = 0; t < T; ++t) w.slots.data_as<int64_t>()[t] = t % 5 == 3 ? -1 : perm[size_t(t)];
  return w;
}

TEST(Fp8DsMla, CacheWriteQuantizesEachTokenAndSkipsPadSlots) {
  for (DType dtype : {DType::bf16, DType::f32, DType::f16}) {
    OwnedLatentCache cache(4, 5, MlaDims::deepseek_v3(1), kFp8DsMla);
    fill_bytes(cache.cache().data, 0x5A);
    const WriteCase w = make_write_case(12, 20, dtype, 11);
    concat_and_cache_mla(w.kv_c, w.k_pe, cache, w.slots);
    std::vector<float> lat(L), rope(R);
    std::vector<uint8_t> want(656);
    std::vector<bool> written(20, false);
    for (int t = 0; t < 12; ++t) {
      const int64_t slot = w.slots.data_as<int64_t>()[t];
      if (slot < 0) continue;
      written[size_t(slot)] = true;
      for (int i = 0; i < L; ++i) lat[i] = load_as_f32(w.kv_c.data(), dtype, t * L + i);
      for (int i = 0; i < R; ++i) rope[i] = load_as_f32(w.k_pe.data(), dtype, t * R + i);
      fp8_ds_mla_encode(lat.data(), rope.data(), L, R, want.data());
      const uint8_t* got = static_cast<const uint8_t*>(cache.cache().data.data()) + slot * 656;
      ASSERT_EQ(std::memcmp(got, want.data(), 656), 0) << "slot " << slot << " dtype " << dtype_name(dtype);
    }
    for (int64_t s = 0; s < 20; ++s) {
      if (written[size_t(s)]) continue;
      const uint8_t* got = static_cast<const uint8_t*>(cache.cache().data.data()) + s * 656;
      for (int i = 0; i < 656; ++i) ASSERT_EQ(got[i], 0x5A) << "untouched slot " << s;
    }
  }
}

TEST(Fp8DsMla, CacheWriteRefusesABadSlotAndWritesNothing) {
  OwnedLatentCache cache(2, 4, MlaDims::deepseek_v3(1), kFp8DsMla);
  fill_bytes(cache.cache().data, 0);
  WriteCase w = make_write_case(3, 8, DType::bf16, 3);
  w.slots.data_as<int64_t>()[2] = 8;
  const uint64_t before = test::hash_bytes(cache.cache().data);
  const std::string msg = test::error_text<ValueError>([&] { concat_and_cache_mla(w.kv_c, w.k_pe, cache, w.slots); });
  EXPECT_NE(msg.find("slot_mapping"), std::string::npos) << msg;
  EXPECT_EQ(test::hash_bytes(cache.cache().data), before);
}

TEST(Fp8DsMla, GatherDequantizesIntoTheWorkspaceDtype) {
  OwnedLatentCache cache(6, 3, MlaDims::deepseek_v3(1), kFp8DsMla);
  const WriteCase w = make_write_case(18, 18, DType::bf16, 5);
  OwnedTensor all_slots = OwnedTensor::empty({18}, DType::i64);
  for (int i = 0; i < 18; ++i) all_slots.data_as<int64_t>()[i] = i;
  concat_and_cache_mla(w.kv_c, w.k_pe, cache, all_slots);
  // Two requests: blocks (4, 1) with 5 tokens, blocks (2, 5, 0) with 7 tokens from seq_start 3.
  OwnedTensor bt = OwnedTensor::empty({2, 4}, DType::i32);
  const int32_t table[] = {4, 1, 99, 99, 3, 2, 5, 0};  // row 1 starts at column 1 (seq_start 3)
  std::memcpy(bt.data(), table, sizeof(table));
  OwnedTensor cu = OwnedTensor::empty({3}, DType::i32), starts = OwnedTensor::empty({2}, DType::i32);
  const int32_t cuv[] = {0, 5, 12}, sv[] = {0, 3};
  std::memcpy(cu.data(), cuv, sizeof(cuv));
  std::memcpy(starts.data(), sv, sizeof(sv));
  for (DType dtype : {DType::f32, DType::bf16}) {
    OwnedTensor dst = OwnedTensor::empty({14, L + R}, dtype);
    test::poison(dst);
    gather_cache(cache, dst, bt, cu, 2, starts);
    std::vector<float> row(L + R);
    const int64_t slots[12] = {12, 13, 14, 3, 4, 6, 7, 8, 15, 16, 17, 0};
    for (int j = 0; j < 12; ++j) {
      fp8_ds_mla_decode(static_cast<const uint8_t*>(cache.cache().data.data()) + slots[j] * 656, L, R, row.data());
      for (int i = 0; i < L + R; ++i) {
        ASSERT_EQ(f32_bits(load_as_f32(dst.data(), dtype, j * (L + R) + i)), f32_bits(round_through(row[i], dtype)))
            << "row " << j << " element " << i;
      }
    }
    EXPECT_TRUE(std::isnan(load_as_f32(dst.data(), dtype, 12 * (L + R))));  // rows past the total untouched
  }
}

TEST(Fp8DsMla, DenseDecodeBackendsRefuseItWithAReason) {
  SelectorConfig config = SelectorConfig::for_dims(MlaDims::deepseek_v3(16), DType::bf16, kFp8DsMla, Device::cpu());
  for (const char* name : {"cpu", "reference"}) {
    const auto reasons = mla_decode_backend_registry().get_class(name)->validate_configuration(std::nullopt, config);
    ASSERT_EQ(reasons.size(), 1u) << name;
    EXPECT_NE(reasons[0].find("kv cache dtype fp8_ds_mla not supported"), std::string::npos) << reasons[0];
  }
}

TEST(Fp8DsMlaGpu, CacheWriteAndGatherMatchTheHostBitForBit) {
  LATTN_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  OwnedLatentCache host(5, 4, MlaDims::deepseek_v3(1), kFp8DsMla);
  OwnedLatentCache dev(5, 4, MlaDims::deepseek_v3(1), kFp8DsMla, gpu);
  fill_bytes(host.cache().data, 0x11);
  fill_bytes(dev.cache().data, 0x11);
  WriteCase w = make_write_case(16, 20, DType::bf16, 9);
  w.kv_c.data_as<uint16_t>()[5] = 0x7fc0;                               // NaN
  w.kv_c.data_as<uint16_t>()[600] = 0x7f80;                             // +inf
  for (int i = 1024; i < 1152; ++i) w.kv_c.data_as<uint16_t>()[i] = 0;  // a zero tile
  concat_and_cache_mla(w.kv_c, w.k_pe, host, w.slots);
  const OwnedTensor kv_d = test::to_device(w.kv_c, gpu), pe_d = test::to_device(w.k_pe, gpu),
                    sl_d = test::to_device(w.slots, gpu);
  concat_and_cache_mla(kv_d, pe_d, dev, sl_d);
  OwnedTensor back = OwnedTensor::empty({5, 4, 656}, DType::u8);
  copy_tensor(dev.cache().data, back);
  EXPECT_EQ(test::hash_bytes(back), test::hash_bytes(host.cache().data));
  EXPECT_EQ(std::memcmp(back.data(), host.cache().data.data(), 5 * 4 * 656), 0);

  OwnedTensor bt = OwnedTensor::empty({1, 5}, DType::i32), cu = OwnedTensor::empty({2}, DType::i32);
  const int32_t table[] = {3, 0, 4, 1, 2}, cuv[] = {0, 19};
  std::memcpy(bt.data(), table, sizeof(table));
  std::memcpy(cu.data(), cuv, sizeof(cuv));
  for (DType dtype : {DType::bf16, DType::f32}) {
    OwnedTensor want = OwnedTensor::empty({19, L + R}, dtype);
    gather_cache(host, want, bt, cu, 1, {});
    OwnedTensor got_d = OwnedTensor::empty({19, L + R}, dtype, gpu);
    gather_cache(dev, got_d, test::to_device(bt, gpu), test::to_device(cu, gpu), 1, {});
    OwnedTensor got = OwnedTensor::empty({19, L + R}, dtype);
    copy_tensor(got_d, got);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.tensor().nbytes()), 0) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace lattn
