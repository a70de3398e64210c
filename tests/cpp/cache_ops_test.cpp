// The latent-cache ops: concat_and_cache_mla, gather_cache, copy_blocks,
// swap_blocks (docs/mla.md), and how they
// refuse bad input without writing anything.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "lattn/cache.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "lattn/ops.h"
#include "support/backend_driver.h"

namespace lattn {
namespace {

using test::hash_bytes;

// Latent dims L = 2, R = 1 (an entry is 3 wide), as in TV-CACHE-W.
const MlaDims kSmall{1, 2, 1, 1, 1};

template <class T>
OwnedTensor host_tensor(std::initializer_list<int64_t> shape, DType dtype, const std::vector<T>& values) {
  OwnedTensor t = OwnedTensor::empty(shape, dtype);
  if constexpr (std::is_floating_point_v<T>) {
    for (size_t i = 0; i < values.size(); ++i) store_from_f32(t.data(), dtype, int64_t(i), float(values[i]));
  } else {
    std::copy(values.begin(), values.end(), t.data_as<T>());
  }
  return t;
}

float entry(const LatentCache& cache, int64_t block, int64_t offset, int64_t e) {
  return load_as_f32(cache.data.ptr_at({block, offset}), cache.dtype(), e);
}

// Expects `fn` to throw ValueError whose message mentions `needle`, and the
// tensor's bytes to be unchanged.
template <class Fn>
void expect_refused(Fn fn, const Tensor& untouched, const std::string& needle) {
  const uint64_t before = hash_bytes(untouched);
  try {
    fn();
    ADD_FAILURE() << "no ValueError (expected one mentioning '" << needle << "')";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(hash_bytes(untouched), before) << "a refused call wrote memory";
}

TEST(TV_SHAPE, KvCacheShapeAndSeedBackendFacts) {
  const KvCacheShape s = get_kv_cache_shape(10, 16, 1, 576);
  EXPECT_EQ(s.num_blocks, 10);
  EXPECT_EQ(s.block_size, 16);
  EXPECT_EQ(s.head_size, 576);
  const KvCacheShape t = MlaCommonBackend::get_kv_cache_shape(10, 16, 8, 576);  // num_kv_heads ignored
  EXPECT_EQ(t.num_blocks, 10);
  EXPECT_EQ(t.head_size, 576);
  EXPECT_EQ(MlaCommonBackend::get_supported_head_sizes(), std::vector<int>{576});
  EXPECT_EQ(MlaCommonBackend::get_name(), "TRITON_MLA");
  // An owned cache has exactly that shape for DeepSeek's dims.
  const OwnedLatentCache cache(10, 16, MlaDims::deepseek_v3(), DType::bf16);
  EXPECT_EQ(cache.cache().data.shape_str(), "[10, 16, 576]");
}

TEST(TV_CACHE_W, WritesSlotsSkipsPadAndTouchesNothingElse) {
  const OwnedLatentCache owned(2, 4, kSmall, DType::bf16);
  const LatentCache& cache = owned;
  fill(cache.data, -9.f);
  const OwnedTensor kv_c = host_tensor<float>({3, 2}, DType::bf16, {1, 2, 3, 4, 5, 6});
  const OwnedTensor k_pe = host_tensor<float>({3, 1, 1}, DType::bf16, {7, 8, 9});  // [T, 1, R] as the seed passes it
  const OwnedTensor slots = host_tensor<int64_t>({3}, DType::i64, {5, PAD_SLOT_ID, 0});
  concat_and_cache_mla(kv_c, k_pe, cache, slots);

  // token 0 -> slot 5 = (block 1, offset 1); token 1 skipped; token 2 -> slot 0.
  EXPECT_EQ(entry(cache, 1, 1, 0), 1.f);
  EXPECT_EQ(entry(cache, 1, 1, 1), 2.f);
  EXPECT_EQ(entry(cache, 1, 1, 2), 7.f);
  EXPECT_EQ(entry(cache, 0, 0, 0), 5.f);
  EXPECT_EQ(entry(cache, 0, 0, 1), 6.f);
  EXPECT_EQ(entry(cache, 0, 0, 2), 9.f);
  int untouched = 0;
  for (int b = 0; b < 2; ++b)
    for (int o = 0; o < 4; ++o)
      if (!((b == 1 && o == 1) || (b == 0 && o == 0)))
        for (int e = 0; e < 3; ++e) untouched += entry(cache, b, o, e) == -9.f;
  EXPECT_EQ(untouched, 6 * 3);
}

TEST(ConcatAndCacheMla, StridedRowsFewerSlotsThanTokensAndConversion) {
  const OwnedLatentCache owned(2, 2, kSmall, DType::f16);
  const LatentCache& cache = owned;
  fill(cache.data, 0.f);
  // kv_c rows are 5 wide in memory (a view of the first 2 columns); inputs f32, cache f16.
  const OwnedTensor wide = host_tensor<float>({3, 5}, DType::f32, {1, 2, 0, 0, 0, 3, 4, 0, 0, 0, 5, 6, 0, 0, 0});
  const Tensor kv_c = wide.tensor().narrow(1, 0, 2);
  const OwnedTensor k_pe = host_tensor<float>({3, 1}, DType::f32, {0.1f, 0.2f, 0.3f});
  // Only two slots: the third token is CUDA-graph padding and is not written.
  const OwnedTensor slots = host_tensor<int64_t>({2}, DType::i64, {3, 1});
  concat_and_cache_mla(kv_c, k_pe, cache, slots);
  EXPECT_EQ(entry(cache, 1, 1, 0), 1.f);
  EXPECT_EQ(entry(cache, 1, 1, 2), round_through(0.1f, DType::f16));
  EXPECT_EQ(entry(cache, 0, 1, 1), 4.f);
  EXPECT_EQ(entry(cache, 0, 0, 0), 0.f);
  EXPECT_EQ(entry(cache, 1, 0, 0), 0.f);
}

TEST(ConcatAndCacheMla, Fp8StoresValueOverScale) {
  const float scale = 0.25f;
  const OwnedLatentCache owned(1, 2, kSmall, DType::fp8_e4m3, Device::cpu(), scale);
  const LatentCache& cache = owned;
  fill_bytes(cache.data, 0);
  const std::vector<float> x{0.3f, -1.7f, 500.f};  // 500 / 0.25 = 2000 saturates at 448
  const OwnedTensor kv_c = host_tensor<float>({1, 2}, DType::bf16, {x[0], x[1]});
  const OwnedTensor k_pe = host_tensor<float>({1, 1}, DType::bf16, {x[2]});
  concat_and_cache_mla(kv_c, k_pe, cache, host_tensor<int64_t>({1}, DType::i64, {1}));
  const auto* stored = static_cast<const uint8_t*>(cache.data.ptr_at({0, 1}));
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(stored[e], f32_to_fp8e4m3(round_through(x[size_t(e)], DType::bf16) / scale)) << "element " << e;
  }
  EXPECT_EQ(fp8e4m3_to_f32(stored[2]), 448.f);
}

TEST(ConcatAndCacheMla, RefusesBadInputAndWritesNothing) {
  const OwnedLatentCache owned(2, 4, kSmall, DType::bf16);
  const LatentCache& cache = owned;
  fill(cache.data, 1.f);
  const OwnedTensor kv_c = host_tensor<float>({3, 2}, DType::bf16, {1, 2, 3, 4, 5, 6});
  const OwnedTensor k_pe = host_tensor<float>({3, 1}, DType::bf16, {7, 8, 9});
  const OwnedTensor good_slots = host_tensor<int64_t>({3}, DType::i64, {0, 1, 2});
  // The last slot is past the cache (8 slots): the first two must not be written either.
  const OwnedTensor bad_slots = host_tensor<int64_t>({3}, DType::i64, {0, 1, 8});
  expect_refused([&] { concat_and_cache_mla(kv_c, k_pe, cache, bad_slots); }, cache.data, "slot_mapping");
  const OwnedTensor kv_wide = host_tensor<float>({3, 3}, DType::bf16, std::vector<float>(9, 1.f));
  expect_refused([&] { concat_and_cache_mla(kv_wide, k_pe, cache, good_slots); }, cache.data, "kv_c");
  const OwnedTensor k_pe_f16 = host_tensor<float>({3, 1}, DType::f16, {7, 8, 9});
  expect_refused([&] { concat_and_cache_mla(kv_c, k_pe_f16, cache, good_slots); }, cache.data, "k_pe");
  const OwnedTensor k_pe_short = host_tensor<float>({2, 1}, DType::bf16, {7, 8});
  expect_refused([&] { concat_and_cache_mla(kv_c, k_pe_short, cache, good_slots); }, cache.data, "k_pe");
  const OwnedTensor slots_i32 = host_tensor<int32_t>({3}, DType::i32, {0, 1, 2});
  expect_refused([&] { concat_and_cache_mla(kv_c, k_pe, cache, slots_i32); }, cache.data, "slot_mapping");
  const OwnedTensor too_many = host_tensor<int64_t>({4}, DType::i64, {0, 1, 2, 3});
  expect_refused([&] { concat_and_cache_mla(kv_c, k_pe, cache, too_many); }, cache.data, "slot_mapping");
  const Tensor kv_c_on_gpu(kv_c.data(), DType::bf16, {3, 2}, Device::cuda(0));
  expect_refused([&] { concat_and_cache_mla(kv_c_on_gpu, k_pe, cache, good_slots); }, cache.data, "kv_c");
  LatentCache wrong_dims = cache;
  wrong_dims.kv_lora_rank = 3;
  expect_refused([&] { concat_and_cache_mla(kv_c, k_pe, wrong_dims, good_slots); }, cache.data, "cache");
}

// A cache whose entry (b, o, e) holds b*12 + o*3 + e (exact in f16).
OwnedLatentCache numbered_cache(int64_t num_blocks, int64_t block_size, DType dtype) {
  OwnedLatentCache owned(num_blocks, block_size, kSmall, dtype);
  for (int64_t b = 0; b < num_blocks; ++b)
    for (int64_t o = 0; o < block_size; ++o)
      for (int e = 0; e < 3; ++e)
        store_from_f32(owned.cache().data.ptr_at({b, o}), dtype, e, float(b * 12 + o * 3 + e));
  return owned;
}

TEST(TV_CACHE_G, GathersFromTheBlockTableAtAlignedStarts) {
  const OwnedLatentCache owned = numbered_cache(10, 4, DType::f16);
  const OwnedTensor block_table = host_tensor<int32_t>({1, 3}, DType::i32, {7, 3, 9});
  const OwnedTensor cu = host_tensor<int32_t>({2}, DType::i32, {0, 6});
  const OwnedTensor starts = host_tensor<int32_t>({1}, DType::i32, {4});
  OwnedTensor dst = OwnedTensor::empty({7, 3}, DType::f16);
  test::poison(dst);
  gather_cache(owned, dst, block_table, cu, 1, starts);
  // seq_starts 4 skips block 7: rows 0-3 = cache[3, 0..3], rows 4-5 = cache[9, 0..1].
  const int64_t expected_blocks[] = {3, 3, 3, 3, 9, 9}, expected_offsets[] = {0, 1, 2, 3, 0, 1};
  for (int64_t row = 0; row < 6; ++row) {
    for (int e = 0; e < 3; ++e) {
      EXPECT_EQ(load_as_f32(dst.data(), DType::f16, row * 3 + e),
                float(expected_blocks[row] * 12 + expected_offsets[row] * 3 + e))
          << "row " << row;
    }
  }
  EXPECT_TRUE(std::isnan(load_as_f32(dst.data(), DType::f16, 6 * 3))) << "row 6 is past cu_seq_lens[1]: untouched";
}

TEST(GatherCache, SeveralRequestsAndConversionToTheWorkspaceDtype) {
  const OwnedLatentCache owned = numbered_cache(6, 2, DType::bf16);
  const OwnedTensor block_table = host_tensor<int32_t>({2, 3}, DType::i32, {5, 0, 2, 4, 1, 3});
  const OwnedTensor cu = host_tensor<int32_t>({3}, DType::i32, {0, 3, 4});
  OwnedTensor dst = OwnedTensor::empty({4, 3}, DType::f32);  // bf16 cache into an f32 workspace
  gather_cache(owned, dst, block_table, cu, 2, Tensor());    // seq_starts undefined: all 0
  const float* d = dst.data_as<float>();
  EXPECT_EQ(d[0 * 3], 5 * 12 + 0 * 3);  // request 0, token 0: block 5 offset 0
  EXPECT_EQ(d[2 * 3], 0 * 12 + 0 * 3);  // request 0, token 2: block 0 offset 0
  EXPECT_EQ(d[3 * 3 + 2], 4 * 12 + 2);  // request 1, token 0: block 4 offset 0, element 2
}

TEST(GatherCache, DequantizesFp8) {
  const float scale = 0.125f;
  const OwnedLatentCache owned(2, 2, kSmall, DType::fp8_e4m3, Device::cpu(), scale);
  fill_bytes(owned.cache().data, 0xff);  // NaN everywhere the gather must not read
  const OwnedTensor kv_c = host_tensor<float>({2, 2}, DType::f32, {0.37f, -0.9f, 0.01f, 2.5f});
  const OwnedTensor k_pe = host_tensor<float>({2, 1}, DType::f32, {-0.2f, 1.1f});
  concat_and_cache_mla(kv_c, k_pe, owned, host_tensor<int64_t>({2}, DType::i64, {2, 3}));
  const OwnedTensor block_table = host_tensor<int32_t>({1, 1}, DType::i32, {1});
  OwnedTensor dst = OwnedTensor::empty({2, 3}, DType::bf16);
  gather_cache(owned, dst, block_table, host_tensor<int32_t>({2}, DType::i32, {0, 2}), 1, Tensor());
  const float inputs[] = {0.37f, -0.9f, -0.2f, 0.01f, 2.5f, 1.1f};
  for (int i = 0; i < 6; ++i) {
    const float stored = fp8e4m3_to_f32(f32_to_fp8e4m3(inputs[i] / scale));
    EXPECT_EQ(load_as_f32(dst.data(), DType::bf16, i), round_through(stored * scale, DType::bf16)) << i;
  }
}

TEST(GatherCache, RefusesUnalignedStartsAndBlocksPastTheCache) {
  const OwnedLatentCache owned = numbered_cache(4, 4, DType::f16);
  OwnedTensor dst = OwnedTensor::empty({8, 3}, DType::f16);
  fill(dst, 0.f);
  const OwnedTensor cu = host_tensor<int32_t>({2}, DType::i32, {0, 6});
  const OwnedTensor table = host_tensor<int32_t>({1, 3}, DType::i32, {0, 1, 2});
  expect_refused([&] { gather_cache(owned, dst, table, cu, 1, host_tensor<int32_t>({1}, DType::i32, {2})); }, dst,
                 "seq_starts");
  const OwnedTensor past = host_tensor<int32_t>({1, 3}, DType::i32, {0, 4, 2});  // block 4 of 4
  expect_refused([&] { gather_cache(owned, dst, past, cu, 1, Tensor()); }, dst, "block_table");
  const OwnedTensor narrow_table = host_tensor<int32_t>({1, 1}, DType::i32, {0});  // 6 tokens need 2 columns
  expect_refused([&] { gather_cache(owned, dst, narrow_table, cu, 1, Tensor()); }, dst, "block_table");
  const OwnedTensor cu_i64 = host_tensor<int64_t>({2}, DType::i64, {0, 6});
  expect_refused([&] { gather_cache(owned, dst, table, cu_i64, 1, Tensor()); }, dst, "cu_seq_lens");
  OwnedTensor small_dst = OwnedTensor::empty({5, 3}, DType::f16);
  fill(small_dst, 0.f);
  expect_refused([&] { gather_cache(owned, small_dst, table, cu, 1, Tensor()); }, small_dst, "dst");
  OwnedTensor wrong_width = OwnedTensor::empty({8, 4}, DType::f16);
  fill(wrong_width, 0.f);
  expect_refused([&] { gather_cache(owned, wrong_width, table, cu, 1, Tensor()); }, wrong_width, "dst");
}

TEST(CopyBlocks, CopiesWholeBlocksInEveryLayer) {
  const OwnedLatentCache a = numbered_cache(4, 2, DType::bf16), b = numbered_cache(4, 2, DType::bf16);
  const std::vector<LatentCache> layers{a, b};
  copy_blocks(layers, host_tensor<int64_t>({2, 2}, DType::i64, {0, 2, 3, 1}));
  for (const LatentCache& cache : layers) {
    EXPECT_EQ(entry(cache, 2, 1, 2), float(0 * 12 + 1 * 3 + 2));  // block 0 -> 2
    EXPECT_EQ(entry(cache, 1, 0, 0), float(3 * 12));              // block 3 -> 1
    EXPECT_EQ(entry(cache, 0, 1, 1), float(0 * 12 + 3 + 1));      // sources unchanged
    EXPECT_EQ(entry(cache, 3, 1, 0), float(3 * 12 + 3));
  }
  copy_blocks({}, host_tensor<int64_t>({1, 2}, DType::i64, {0, 1}));  // no layers: nothing to do
}

TEST(CopyBlocks, RefusesIdsPastAnyCacheAndChangesNoLayer) {
  const OwnedLatentCache big = numbered_cache(6, 2, DType::bf16), small = numbered_cache(3, 2, DType::bf16);
  const std::vector<LatentCache> layers{big, small};
  const uint64_t small_hash = hash_bytes(small.cache().data);
  // Block 4 exists in the first layer only: refused before the first layer is touched.
  expect_refused(
      [&] {
        copy_blocks(layers, host_tensor<int64_t>({2, 2}, DType::i64, {0, 1, 4, 0}));
      },
      big.cache().data, "block_mapping");
  EXPECT_EQ(hash_bytes(small.cache().data), small_hash);
  expect_refused(
      [&] {
        copy_blocks(layers, host_tensor<int64_t>({1, 3}, DType::i64, {0, 1, 2}));
      },
      big.cache().data, "block_mapping");
  expect_refused(
      [&] {
        copy_blocks(layers, host_tensor<int32_t>({1, 2}, DType::i32, {0, 1}));
      },
      big.cache().data, "block_mapping");
}

// Pairs are copied concurrently: a block both read and written (2 -> 0 beside 0 -> 1, or 1 -> 1), or written
// twice, in one call is refused before any layer changes.
TEST(CopyBlocks, RefusesDestinationsThatAreSourcesOrRepeated) {
  const OwnedLatentCache a = numbered_cache(6, 2, DType::bf16), b = numbered_cache(6, 2, DType::bf16);
  const std::vector<LatentCache> layers{a, b};
  const uint64_t b_hash = hash_bytes(b.cache().data);
  for (const std::vector<int64_t>& pairs :
       {std::vector<int64_t>{0, 1, 2, 0}, std::vector<int64_t>{1, 1}, std::vector<int64_t>{0, 3, 2, 3}}) {
    expect_refused(
        [&] {
          copy_blocks(layers, host_tensor<int64_t>({int64_t(pairs.size() / 2), 2}, DType::i64, pairs));
        },
        a.cache().data, "block_mapping");
    EXPECT_EQ(hash_bytes(b.cache().data), b_hash);
  }
  copy_blocks(layers, host_tensor<int64_t>({2, 2}, DType::i64, {0, 4, 0, 5}));  // one source, two copies: fine
  EXPECT_EQ(entry(a.cache(), 5, 1, 0), entry(a.cache(), 0, 1, 0));
}

TEST(SwapBlocks, HostToHost) {
  const OwnedLatentCache src = numbered_cache(3, 2, DType::f16);
  OwnedLatentCache dst(5, 2, kSmall, DType::f16);
  fill(dst.cache().data, -1.f);
  swap_blocks(src, dst, host_tensor<int64_t>({2, 2}, DType::i64, {2, 0, 0, 4}));
  EXPECT_EQ(entry(dst, 0, 1, 2), float(2 * 12 + 3 + 2));
  EXPECT_EQ(entry(dst, 4, 0, 0), 0.f);
  EXPECT_EQ(entry(dst, 1, 0, 0), -1.f);
  EXPECT_EQ(entry(dst, 3, 1, 1), -1.f);
}

TEST(SwapBlocks, RefusesMismatchedCachesAndIds) {
  const OwnedLatentCache src = numbered_cache(3, 2, DType::f16);
  OwnedLatentCache dst(5, 2, kSmall, DType::f16);
  fill(dst.cache().data, -1.f);
  expect_refused(
      [&] {
        swap_blocks(src, dst, host_tensor<int64_t>({1, 2}, DType::i64, {3, 0}));
      },
      dst.cache().data, "block_mapping");
  expect_refused(
      [&] {
        swap_blocks(src, dst, host_tensor<int64_t>({1, 2}, DType::i64, {0, 5}));
      },
      dst.cache().data, "block_mapping");
  OwnedLatentCache other_dtype(5, 2, kSmall, DType::bf16);
  fill(other_dtype.cache().data, -1.f);
  expect_refused(
      [&] {
        swap_blocks(src, other_dtype, host_tensor<int64_t>({1, 2}, DType::i64, {0, 0}));
      },
      other_dtype.cache().data, "dst");
  OwnedLatentCache other_block(5, 4, kSmall, DType::f16);
  fill(other_block.cache().data, -1.f);
  expect_refused(
      [&] {
        swap_blocks(src, other_block, host_tensor<int64_t>({1, 2}, DType::i64, {0, 0}));
      },
      other_block.cache().data, "dst");
}

}  // namespace
}  // namespace lattn
