// KvCacheSpec: one value for a latent cache's dims, dtype, block size and
// scale, said the same way by a cache, a layer's config, a selector config
// and a decode plan, set into every config from one value; and the one
// refusal of a cache that does not match.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "lattn/attention.h"
#include "lattn/backend.h"
#include "lattn/cache.h"
#include "lattn/errors.h"
#include "lattn/functional.h"
#include "lattn/kv_cache_spec.h"
#include "lattn/metadata.h"
#include "lattn/mla_common_state.h"
#include "lattn/sparse.h"
#include "support/error_text.h"

namespace lattn {
namespace {

TEST(KvCacheSpec, EntryDimAndText) {
  const KvCacheSpec deepseek{512, 64, DType::bf16, 16};
  EXPECT_EQ(deepseek.entry_dim(), 576);
  EXPECT_EQ(deepseek.str(), "L=512 R=64 bf16 block_size=16");
  const KvCacheSpec fp8{256, 32, DType::fp8_e4m3, 1, 0.5f};
  EXPECT_EQ(fp8.entry_dim(), 288);
  EXPECT_NE(fp8.str().find("scale=0.5"), std::string::npos) << fp8.str();
  EXPECT_NE(KvCacheSpec{}, fp8);
}

TEST(KvCacheSpec, OwnedCacheFromASpecSaysThatSpec) {
  for (const KvCacheSpec spec : {KvCacheSpec{512, 64, DType::bf16, 16, 1.f}, KvCacheSpec{64, 16, DType::f16, 1, 1.f},
                                 KvCacheSpec{256, 32, DType::fp8_e4m3, 3, 0.25f}}) {
    SCOPED_TRACE(spec.str());
    const OwnedLatentCache owned(5, spec);
    const LatentCache& cache = owned;
    EXPECT_EQ(cache.spec(), spec);
    EXPECT_EQ(cache.num_blocks(), 5);
    EXPECT_EQ(cache.block_size(), spec.block_size);
    EXPECT_EQ(cache.entry_dim(), spec.entry_dim());
    // The field-by-field constructor makes the same cache.
    const MlaDims dims{4, spec.kv_lora_rank, 8, spec.qk_rope_head_dim, 8};
    const OwnedLatentCache same(5, spec.block_size, dims, spec.dtype, Device::cpu(), spec.scale);
    EXPECT_EQ(same.cache().spec(), spec);
  }
  // fp8_ds_mla: the entry is bytes (656 for DeepSeek), the spec still says L and R.
  const KvCacheSpec ds{512, 64, kFp8DsMla, 64};
  const OwnedLatentCache packed(2, ds);
  EXPECT_EQ(packed.cache().spec(), ds);
  EXPECT_EQ(packed.cache().entry_dim(), fp8_ds_mla_entry_bytes(512, 64));
}

TEST(KvCacheSpec, OwnedCacheRefusesABadBlockSize) {
  for (const int block_size : {0, -1}) {
    const std::string text = test::error_text<ValueError>([&] {
      OwnedLatentCache(1, KvCacheSpec{64, 16, DType::bf16, block_size});
    });
    EXPECT_NE(text.find("block_size"), std::string::npos) << text;
    EXPECT_NE(text.find(std::to_string(block_size)), std::string::npos) << text;
  }
  EXPECT_THROW(OwnedLatentCache(1, int64_t(1) << 40, MlaDims{1, 64, 1, 16, 1}, DType::bf16), ValueError);
}

TEST(KvCacheSpec, ConfigsSayTheirCacheFactsAsOneValue) {
  MlaAttentionConfig layer;
  layer.dims = MlaDims::minicpm3();
  layer.kv_cache_dtype = DType::fp8_e4m3;
  layer.block_size = 32;
  EXPECT_EQ(layer.kv_cache_spec(), (KvCacheSpec{256, 32, DType::fp8_e4m3, 32, 1.f}));

  const SelectorConfig selector =
      SelectorConfig::for_dims(layer.dims, DType::bf16, layer.kv_cache_dtype, Device::cpu(), layer.block_size);
  EXPECT_EQ(selector.kv_cache_spec(), layer.kv_cache_spec());
  SelectorConfig set;
  set.set_kv_cache_spec(layer.kv_cache_spec());
  EXPECT_EQ(set.kv_lora_rank, 256);
  EXPECT_EQ(set.qk_rope_head_dim, 32);
  EXPECT_EQ(set.kv_cache_dtype, DType::fp8_e4m3);
  EXPECT_EQ(set.block_size, 32);
}

// An engine that holds one KvCacheSpec per cache sets every config from it;
// what the builder then makes (the metadata and both views) says the same
// block size, and a forward check compares that with the cache.
TEST(KvCacheSpec, EveryConfigIsSetFromOneSpec) {
  const KvCacheSpec spec{256, 32, DType::f16, 3};

  MlaAttentionConfig layer;
  layer.set_kv_cache_spec(spec);
  EXPECT_EQ(layer.kv_cache_spec(), spec);
  EXPECT_EQ(layer.dims.kv_lora_rank, 256);
  EXPECT_EQ(layer.dims.qk_rope_head_dim, 32);
  EXPECT_EQ(layer.kv_cache_dtype, DType::f16);
  EXPECT_EQ(layer.block_size, 3);

  MlaCommonStateConfig state;
  state.set_kv_cache_spec(spec);
  EXPECT_EQ(state.block_size, 3);
  EXPECT_EQ(state.head_size, 288);

  MetadataBuilderConfig config;
  config.set_kv_cache_spec(spec);
  EXPECT_EQ(config.block_size, 3);
  EXPECT_FALSE(config.head_dim.has_value());  // the vLLM head-size check stays opt-in
  config.chunked_prefill_enabled = false;
  const MlaMetadataBuilder builder(config);
  // One decode (5 tokens of context) and one prefill without context.
  const RequestSpec requests[] = {{1, 5, {0, 1}}, {4, 0, {2, 3}}};
  const MlaMetadata md = builder.build(requests);
  EXPECT_EQ(md.block_size, spec.block_size);
  ASSERT_NE(md.decode_metadata(), nullptr);
  ASSERT_NE(md.prefill_metadata(), nullptr);
  EXPECT_EQ(md.decode_metadata()->block_size, spec.block_size);
  EXPECT_EQ(md.prefill_metadata()->block_size, spec.block_size);
}

// mla_decode refuses a cache whose spec differs from its plan's, in any one
// fact, naming the argument and the plan; `out` is not written.
TEST(KvCacheSpec, DecodeRefusesACacheThatIsNotThePlans) {
  const int B = 2, N = 4, L = 64, R = 16, block = 4;
  DecodePlanParams params;
  params.num_heads = N;
  params.kv_lora_rank = L;
  params.qk_rope_head_dim = R;
  params.dtype = DType::f32;
  params.backend = "reference";
  OwnedTensor table = OwnedTensor::zeros({B, 2}, DType::i32);
  table.data_as<int32_t>()[2] = 1;  // request 1 lives in block 1
  OwnedTensor lens = OwnedTensor::empty({B}, DType::i32);
  lens.data_as<int32_t>()[0] = 3;
  lens.data_as<int32_t>()[1] = 4;
  DecodePlan plan(params, table, lens, block);
  const KvCacheSpec expected{L, R, DType::bf16, block};
  EXPECT_EQ(plan.kv_cache_spec(), expected);
  EXPECT_EQ(plan.block_size(), block);

  OwnedTensor q = OwnedTensor::zeros({B, N, L + R}, DType::f32);
  OwnedTensor out = OwnedTensor::empty({B, N, L}, DType::f32);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < out.tensor().numel(); ++i) out.data_as<float>()[i] = nan;
  struct Wrong {
    KvCacheSpec spec;
    const char* says;
  };
  for (const Wrong& w : {Wrong{{L, R, DType::bf16, block + 1}, "block size"}, Wrong{{L, R, DType::f16, block}, "dtype"},
                         Wrong{{L * 2, R, DType::bf16, block}, "latent dims"}}) {
    SCOPED_TRACE(w.spec.str());
    const OwnedLatentCache cache(2, w.spec);
    const std::string text = test::error_text<ValueError>([&] { mla_decode(q, cache, plan, 0.1f, out, Tensor()); });
    EXPECT_NE(text.find("mla_decode: argument 'cache'"), std::string::npos) << text;
    EXPECT_NE(text.find(w.says), std::string::npos) << text;
    EXPECT_NE(text.find("the plan"), std::string::npos) << text;
    for (int64_t i = 0; i < out.tensor().numel(); ++i) ASSERT_TRUE(std::isnan(out.data_as<float>()[i])) << i;
  }
  // The matching cache runs.
  const OwnedLatentCache cache(2, expected);
  fill_bytes(cache.cache().data, 0);
  EXPECT_NO_THROW(mla_decode(q, cache, plan, 0.1f, out, Tensor()));
}

}  // namespace
}  // namespace lattn
