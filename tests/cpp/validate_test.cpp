// validate_configuration's reasons (docs/backends.md): the seeds' exact
// texts, in the seeds' order, for the prefill class defaults, and the decode
// class's additions.
#include <gtest/gtest.h>

#include "lattn/backend.h"
#include "support/backend_doubles.h"

namespace lattn {
namespace {

using test::cuda_at_least;
using test::decode_double;
using test::prefill_double;
using Reasons = std::vector<std::string>;

constexpr DeviceCapability kSm80{8, 0};
constexpr DeviceCapability kSm90{9, 0};

SelectorConfig prefill_config(DType dtype, MLADimensions dims = kDeepSeekR1MlaDimensions) {
  SelectorConfig c;
  c.dtype = dtype;
  c.mla_dimensions = dims;
  c.is_r1_compatible = is_deepseek_r1_mla_compatible(dims);
  return c;
}

TEST(TV_VALIDATE, DefaultBackendAcceptsF16AndBf16OnAnyCapability) {
  const auto cls = prefill_double({});
  for (const std::optional<DeviceCapability> cap : {std::optional<DeviceCapability>{}, std::optional(kSm80),
                                                    std::optional(kSm90), std::optional(DeviceCapability{10, 0})}) {
    EXPECT_EQ(cls->validate_configuration(cap, prefill_config(DType::f16)), Reasons{});
    EXPECT_EQ(cls->validate_configuration(cap, prefill_config(DType::bf16)), Reasons{});
  }
}

TEST(TV_VALIDATE, Float32IsRefusedByTheDefaultDtypes) {
  EXPECT_EQ(prefill_double({})->validate_configuration(kSm90, prefill_config(DType::f32)),
            Reasons{"dtype torch.float32 not supported"});
}

TEST(TV_VALIDATE, CapabilityDtypeAndAvailabilityInTheSeedOrder) {
  const auto cls = prefill_double({.capability = cuda_at_least(9), .available = false});
  EXPECT_EQ(cls->validate_configuration(kSm80, prefill_config(DType::f32)),
            (Reasons{"compute capability 8.0 not supported", "dtype torch.float32 not supported",
                     "required dependencies not available"}));
  // No capability at all (the CPU): lattn's wording of the same reason.
  EXPECT_EQ(cls->validate_configuration(std::nullopt, prefill_config(DType::bf16)),
            (Reasons{"compute capability none (cpu) not supported", "required dependencies not available"}));
  // Minor versions print as they are.
  EXPECT_EQ(cls->validate_configuration(DeviceCapability{8, 9}, prefill_config(DType::bf16)),
            (Reasons{"compute capability 8.9 not supported", "required dependencies not available"}));
}

TEST(TV_VALIDATE, S1RequiresR1Dimensions) {
  const auto cls = prefill_double({.requires_r1 = true});
  SelectorConfig config = prefill_config(DType::bf16, {192, 64, 256});
  ASSERT_FALSE(config.is_r1_compatible);
  EXPECT_EQ(cls->validate_configuration(kSm90, config),
            Reasons{"model does not have DeepSeek R1 MLA dimensions (qk_nope_head_dim=128, qk_rope_head_dim=64, "
                    "v_head_dim=128)"});
  EXPECT_EQ(cls->validate_configuration(kSm90, prefill_config(DType::bf16)), Reasons{});
}

TEST(TV_VALIDATE, S0SupportedDimensions) {
  const auto cls = prefill_double({.supported_dims = {kDeepSeekR1MlaDimensions}});
  EXPECT_EQ(cls->validate_configuration(kSm90, prefill_config(DType::bf16, {192, 64, 256})),
            Reasons{"Model does not have supported MLA dimensions (got (qk_nope_head_dim=192, qk_rope_head_dim=64, "
                    "v_head_dim=256); supported: (qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128))"});
  EXPECT_EQ(cls->validate_configuration(kSm90, prefill_config(DType::bf16)), Reasons{});
  // Several supported dims are joined with ", ".
  const auto two = prefill_double({.supported_dims = {kDeepSeekR1MlaDimensions, {64, 32, 64}}});
  EXPECT_EQ(two->validate_configuration(kSm90, prefill_config(DType::bf16, {192, 64, 256})),
            Reasons{"Model does not have supported MLA dimensions (got (qk_nope_head_dim=192, qk_rope_head_dim=64, "
                    "v_head_dim=256); supported: (qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128), "
                    "(qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64))"});
  // Empty supported dims: no dimension reason for any model.
  EXPECT_EQ(prefill_double({})->validate_configuration(kSm90, prefill_config(DType::bf16, {192, 64, 256})), Reasons{});
}

// The superset: a class with both revisions' gates reports both texts, S1's first.
TEST(TV_VALIDATE, BothDimensionMessagesAfterTheOthersInOrder) {
  const auto cls = prefill_double({.dtypes = {DType::bf16},
                                   .supported_dims = {kDeepSeekR1MlaDimensions},
                                   .requires_r1 = true,
                                   .capability = cuda_at_least(9),
                                   .available = false});
  EXPECT_EQ(cls->validate_configuration(kSm80, prefill_config(DType::f16, {192, 64, 256})),
            (Reasons{"compute capability 8.0 not supported", "dtype torch.float16 not supported",
                     "required dependencies not available",
                     "model does not have DeepSeek R1 MLA dimensions (qk_nope_head_dim=128, qk_rope_head_dim=64, "
                     "v_head_dim=128)",
                     "Model does not have supported MLA dimensions (got (qk_nope_head_dim=192, qk_rope_head_dim=64, "
                     "v_head_dim=256); supported: (qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128))"}));
}

TEST(TV_VALIDATE, SupportsDtypeFollowsSupportedDtypes) {
  const auto cls = prefill_double({.dtypes = {DType::f32}});
  EXPECT_TRUE(cls->supports_dtype(DType::f32));
  EXPECT_FALSE(cls->supports_dtype(DType::bf16));
  EXPECT_FALSE(prefill_double({})->supports_quant_output(QuantKey::fp8_e4m3_static_per_tensor));
}

SelectorConfig decode_config() {
  SelectorConfig c = SelectorConfig::for_dims(MlaDims::deepseek_v3(16), DType::bf16, DType::fp8_e4m3, Device::cpu(),
                                              /*block_size=*/64, /*max_query_tokens_per_request=*/4);
  return c;
}

TEST(TV_VALIDATE, DecodeReasonsInOrder) {
  EXPECT_EQ(decode_double({})->validate_configuration(kSm90, decode_config()), Reasons{});
  const auto cls = decode_double({.kv_cache_dtypes = {DType::bf16},
                                  .block_sizes = {16, 32},
                                  .latent_dims = {{256, 32}},
                                  .max_query_tokens = 1,
                                  .capability = cuda_at_least(9),
                                  .available = false});
  SelectorConfig config = decode_config();
  config.dtype = DType::f32;
  EXPECT_EQ(cls->validate_configuration(kSm80, config),
            (Reasons{"compute capability 8.0 not supported", "dtype torch.float32 not supported",
                     "required dependencies not available", "kv cache dtype torch.float8_e4m3fn not supported",
                     "block size 64 not supported (supported: 16, 32)",
                     "latent dims (512, 64) not supported (supported: (256, 32))",
                     "4 query tokens per request not supported (max 1)"}));
}

TEST(TV_VALIDATE, SelectorConfigReprs) {
  const SelectorConfig c = decode_config();
  EXPECT_EQ(c.repr(),
            "MLAPrefillSelectorConfig(dtype=torch.bfloat16, mla_dimensions=(qk_nope_head_dim=128, qk_rope_head_dim=64, "
            "v_head_dim=128))");
  EXPECT_EQ(c.decode_repr(),
            "MLADecodeSelectorConfig(dtype=torch.bfloat16, kv_cache_dtype=torch.float8_e4m3fn, num_heads=16, "
            "kv_lora_rank=512, qk_rope_head_dim=64, block_size=64, max_query_tokens_per_request=4)");
  EXPECT_TRUE(c.is_r1_compatible);
  EXPECT_FALSE(SelectorConfig::for_dims(MlaDims::minicpm3(), DType::bf16, DType::bf16, Device::cpu()).is_r1_compatible);
}

}  // namespace
}  // namespace lattn
