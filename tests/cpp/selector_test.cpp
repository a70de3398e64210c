// The selector (docs/backends.md): explicit choices and their refusals,
// the priority walk per device, environment overrides, memoization.
// Every member the walk may visit is overridden with a test double, so the
// outcome does not depend on which real backends this build links.
#include <gtest/gtest.h>

#include "support/error_text.h"

#include <algorithm>
#include <cstdlib>

#include "lattn/errors.h"
#include "lattn/registry.h"
#include "lattn/selector.h"
#include "support/backend_doubles.h"

namespace lattn {
namespace {

using test::cpu_only;
using test::cuda_at_least;
using test::decode_double;
using test::prefill_double;

constexpr DeviceCapability kSm80{8, 0};
constexpr DeviceCapability kSm89{8, 9};
constexpr DeviceCapability kSm90{9, 0};
constexpr DeviceCapability kSm100{10, 0};

using test::error_text;

class SelectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv(kPrefillBackendEnvVar);
    unsetenv(kDecodeBackendEnvVar);
    test::reset_backend_selection_state();
  }
  void TearDown() override { SetUp(); }

  // bf16 DeepSeek layer on the CPU.
  static SelectorConfig cpu_config(DType dtype = DType::bf16) {
    return SelectorConfig::for_dims(MlaDims::deepseek_v3(16), dtype, DType::bf16, Device::cpu());
  }
  static SelectorConfig gpu_config(DType dtype = DType::bf16) {
    return SelectorConfig::for_dims(MlaDims::deepseek_v3(16), dtype, DType::bf16, Device::cuda(0));
  }
};

TEST_F(SelectorTest, PriorityListsPerDevice) {
  using Names = std::vector<std::string>;
  EXPECT_EQ(mla_backend_priorities(Device::cpu(), std::nullopt), (Names{"cpu", "reference"}));
  EXPECT_EQ(mla_backend_priorities(Device::cuda(0), kSm90), (Names{"hopper", "cuda", "reference"}));
  EXPECT_EQ(mla_backend_priorities(Device::cuda(0), DeviceCapability{9, 2}), (Names{"hopper", "cuda", "reference"}));
  EXPECT_EQ(mla_backend_priorities(Device::cuda(1), kSm80), (Names{"cuda", "reference"}));
  EXPECT_EQ(mla_backend_priorities(Device::cuda(0), kSm89), (Names{"cuda", "reference"}));
  EXPECT_EQ(mla_backend_priorities(Device::cuda(0), kSm100), (Names{"cuda", "reference"}));
  EXPECT_EQ(mla_backend_priorities(Device::cuda(0), std::nullopt), (Names{"cuda", "reference"}));
}

TEST_F(SelectorTest, TV_SELECT_NoCapabilityWalksTheCpuListWithValidation) {
  auto cpu = prefill_double({.name = "cpu_double", .capability = cpu_only});
  auto reference = prefill_double({.name = "reference_double"});
  register_mla_prefill_backend("cpu", cpu);
  register_mla_prefill_backend("reference", reference);
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, cpu_config()), cpu);
  // The one-argument form finds no capability for the CPU device itself.
  EXPECT_EQ(get_mla_prefill_backend(cpu_config()), cpu);
  // A capability passed with a CPU device is ignored: the CPU has none.
  EXPECT_EQ(get_mla_prefill_backend(kSm90, cpu_config()), cpu);
  EXPECT_EQ(selector_device_capability(cpu_config()), std::nullopt);
}

TEST_F(SelectorTest, TV_SELECT_ReferenceIsPickedOnlyWhenNothingBeforeItIsValid) {
  auto reference = prefill_double({.name = "reference_double", .dtypes = {DType::f32, DType::f16, DType::bf16}});
  register_mla_prefill_backend("reference", reference);
  register_mla_prefill_backend("cpu", prefill_double({.name = "cpu_double"}));  // no f32
  register_mla_prefill_backend("cuda", prefill_double({.name = "cuda_double", .capability = cuda_at_least(8)}));
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, cpu_config(DType::f32)), reference);
  EXPECT_NE(get_mla_prefill_backend(std::nullopt, cpu_config(DType::bf16)), reference);
  EXPECT_NE(get_mla_prefill_backend(kSm80, gpu_config()), reference);
  EXPECT_EQ(get_mla_prefill_backend(kSm80, gpu_config(DType::f32)), reference);
}

TEST_F(SelectorTest, TV_SELECT_ExplicitValidChoiceIsReturned) {
  auto reference = prefill_double({.name = "reference_double"});
  register_mla_prefill_backend("reference", reference);
  register_mla_prefill_backend("cpu", prefill_double({.name = "cpu_double"}));
  SelectorConfig config = cpu_config();
  config.prefill_backend = "reference";
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, config), reference);
  config.prefill_backend = "REFERENCE";  // names are case-insensitive
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, config), reference);
}

TEST_F(SelectorTest, TV_SELECT_ExplicitChoiceThatCannotBeResolvedIsAnImportErrorReason) {
  register_mla_prefill_backend("CUSTOM", "/nonexistent/dir/libno_backend.so:no_symbol");
  SelectorConfig config = gpu_config();
  config.prefill_backend = "CUSTOM";
  const std::string text = error_text<ValueError>([&] { get_mla_prefill_backend(kSm90, config); });
  const std::string seed =
      "Selected MLA prefill backend CUSTOM is not valid for this configuration. Reason: "
      "['ImportError']";
  ASSERT_EQ(text.rfind(seed, 0), 0u) << text;
  // Then the import error itself, which says what to change.
  EXPECT_EQ(text.substr(seed.size())
                .rfind(". Cannot load MLA prefill backend plug-in "
                       "'/nonexistent/dir/libno_backend.so': ",
                       0),
            0u)
      << text;
}

TEST_F(SelectorTest, TV_SELECT_ExplicitUnregisteredCustomPropagatesTheRegistryError) {
  SelectorConfig config = gpu_config();
  config.prefill_backend = "CUSTOM";
  EXPECT_EQ(error_text<ValueError>([&] { get_mla_prefill_backend(kSm90, config); }),
            "MLA prefill backend CUSTOM must be registered before use. Use "
            "register_mla_prefill_backend(\"CUSTOM\", \"path/to/libyour_backend.so:your_symbol\")");
}

TEST_F(SelectorTest, TV_SELECT_ExplicitInvalidChoiceListsItsReasons) {
  register_mla_prefill_backend("cuda", prefill_double({.name = "cuda_double", .capability = cuda_at_least(8)}));
  SelectorConfig config = cpu_config(DType::f32);
  config.prefill_backend = "cuda";
  EXPECT_EQ(error_text<ValueError>([&] { get_mla_prefill_backend(std::nullopt, config); }),
            "Selected MLA prefill backend cuda is not valid for this configuration. Reason: ['compute capability "
            "none (cpu) not supported', 'dtype torch.float32 not supported']. Select another MLA prefill backend, "
            "or leave the prefill_backend setting empty to let lattn choose.");
}

TEST_F(SelectorTest, TV_SELECT_EnumLookupOfAnUnknownChoice) {
  SelectorConfig config = cpu_config();
  config.prefill_backend = "flash_attn";
  std::string valid;
  for (const auto& n : mla_prefill_backend_registry().names()) valid += (valid.empty() ? "" : ", ") + n;
  EXPECT_EQ(error_text<ValueError>([&] { get_mla_prefill_backend(std::nullopt, config); }),
            "Unknown MLA prefill backend: 'flash_attn'. Valid options are: " + valid);
}

// The seeds' "major 10: FLASH_ATTN invalid, TRTLLM_RAGGED valid" case, on
// lattn's sm90 list: hopper invalid, cuda valid -> cuda.
TEST_F(SelectorTest, TV_SELECT_AutoOnSm90SkipsAnInvalidFirstChoice) {
  register_mla_prefill_backend("hopper", prefill_double({.name = "hopper_double", .available = false}));
  auto cuda = prefill_double({.name = "cuda_double", .capability = cuda_at_least(8)});
  register_mla_prefill_backend("cuda", cuda);
  register_mla_prefill_backend("reference", prefill_double({.name = "reference_double"}));
  EXPECT_EQ(get_mla_prefill_backend(kSm90, gpu_config()), cuda);
}

TEST_F(SelectorTest, AutoOnSm90PrefersHopperAndSm80NeverConsidersIt) {
  auto hopper = prefill_double({.name = "hopper_double"});
  auto cuda = prefill_double({.name = "cuda_double"});
  register_mla_prefill_backend("hopper", hopper);
  register_mla_prefill_backend("cuda", cuda);
  EXPECT_EQ(get_mla_prefill_backend(kSm90, gpu_config()), hopper);
  EXPECT_EQ(get_mla_prefill_backend(kSm80, gpu_config()), cuda);
  EXPECT_EQ(get_mla_prefill_backend(kSm100, gpu_config()), cuda);
  EXPECT_EQ(hopper->validations.load(), 1);  // visited on sm90 only
}

TEST_F(SelectorTest, TV_SELECT_NoValidBackendListsEveryReason) {
  register_mla_prefill_backend("cpu", prefill_double({.name = "cpu_double", .capability = cpu_only}));
  register_mla_prefill_backend("reference", prefill_double({.name = "reference_double", .available = false}));
  EXPECT_EQ(error_text<ValueError>([&] { get_mla_prefill_backend(std::nullopt, cpu_config(DType::f32)); }),
            "No valid MLA prefill backend found with MLAPrefillSelectorConfig(dtype=torch.float32, "
            "mla_dimensions=(qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)). Reasons: {cpu: [dtype "
            "torch.float32 not supported], reference: [dtype torch.float32 not supported, required dependencies not "
            "available]}. Change the dtype, MLA dimensions or device to values one of these backends supports, or "
            "register a backend that supports them (see docs/backends.md).");
}

TEST_F(SelectorTest, AutoReportsUnresolvableMembersAsImportError) {
  register_mla_prefill_backend("hopper", "/nonexistent/libhopper.so:hopper_plugin");
  register_mla_prefill_backend("cuda", prefill_double({.name = "cuda_double", .available = false}));
  register_mla_prefill_backend("reference", prefill_double({.name = "reference_double", .capability = cpu_only}));
  const std::string text = error_text<ValueError>([&] { get_mla_prefill_backend(kSm90, gpu_config()); });
  EXPECT_NE(text.find("Reasons: {hopper: [ImportError], cuda: [required dependencies not available], reference: "
                      "[compute capability 9.0 not supported]}."),
            std::string::npos)
      << text;
}

TEST_F(SelectorTest, EnvironmentVariableChoosesWhenTheConfigDoesNot) {
  auto cpu = prefill_double({.name = "cpu_double"});
  auto reference = prefill_double({.name = "reference_double"});
  register_mla_prefill_backend("cpu", cpu);
  register_mla_prefill_backend("reference", reference);
  setenv(kPrefillBackendEnvVar, "reference", 1);
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, cpu_config()), reference);
  // The config field wins over the environment.
  SelectorConfig config = cpu_config();
  config.prefill_backend = "cpu";
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, config), cpu);
  // Empty means unset: automatic selection.
  setenv(kPrefillBackendEnvVar, "", 1);
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, cpu_config()), cpu);
  // The decode variable does not affect prefill.
  setenv(kDecodeBackendEnvVar, "reference", 1);
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, cpu_config()), cpu);
}

TEST_F(SelectorTest, EnvironmentRefusalsNameTheVariable) {
  register_mla_prefill_backend("cuda", prefill_double({.name = "cuda_double", .capability = cuda_at_least(8)}));
  setenv(kPrefillBackendEnvVar, "flashinfer", 1);
  std::string valid;
  for (const auto& n : mla_prefill_backend_registry().names()) valid += (valid.empty() ? "" : ", ") + n;
  EXPECT_EQ(error_text<ValueError>([&] { get_mla_prefill_backend(std::nullopt, cpu_config()); }),
            "Unknown MLA prefill backend: 'flashinfer'. Valid options are: " + valid +
                ". Set LATTN_MLA_PREFILL_BACKEND to one of them, or unset it to let lattn choose.");
  setenv(kPrefillBackendEnvVar, "cuda", 1);
  EXPECT_EQ(error_text<ValueError>([&] { get_mla_prefill_backend(std::nullopt, cpu_config()); }),
            "Selected MLA prefill backend cuda is not valid for this configuration. Reason: ['compute capability "
            "none (cpu) not supported']. Select another MLA prefill backend, or unset LATTN_MLA_PREFILL_BACKEND to "
            "let lattn choose.");
}

TEST_F(SelectorTest, AutomaticChoicesAreMemoizedUntilCleared) {
  auto cpu = prefill_double({.name = "cpu_double", .dtypes = {DType::f32, DType::bf16}});
  auto reference = prefill_double({.name = "reference_double"});
  register_mla_prefill_backend("cpu", cpu);
  register_mla_prefill_backend("reference", reference);
  EXPECT_EQ(auto_select_mla_prefill_backend(std::nullopt, cpu_config()), cpu);
  EXPECT_EQ(auto_select_mla_prefill_backend(std::nullopt, cpu_config()), cpu);
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, cpu_config()), cpu);
  EXPECT_EQ(cpu->validations.load(), 1);
  // Another selector config is another entry.
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, cpu_config(DType::f32)), cpu);
  EXPECT_EQ(cpu->validations.load(), 2);
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, cpu_config(DType::f32)), cpu);
  EXPECT_EQ(cpu->validations.load(), 2);
  // An explicit choice is validated every time (the env may change between calls).
  SelectorConfig config = cpu_config();
  config.prefill_backend = "cpu";
  get_mla_prefill_backend(std::nullopt, config);
  EXPECT_EQ(cpu->validations.load(), 3);

  clear_mla_backend_selection_cache();
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, cpu_config()), cpu);
  EXPECT_EQ(cpu->validations.load(), 4);
  EXPECT_EQ(reference->validations.load(), 0);
}

TEST_F(SelectorTest, MemoizationIsKeyedByCapability) {
  auto cuda = prefill_double({.name = "cuda_double", .capability = cuda_at_least(8)});
  register_mla_prefill_backend("cuda", cuda);
  EXPECT_EQ(get_mla_prefill_backend(kSm80, gpu_config()), cuda);
  EXPECT_EQ(get_mla_prefill_backend(kSm89, gpu_config()), cuda);
  EXPECT_EQ(get_mla_prefill_backend(kSm80, gpu_config()), cuda);
  EXPECT_EQ(cuda->validations.load(), 2);
}

TEST_F(SelectorTest, ARegistryChangeDropsMemoizedChoices) {
  auto first = prefill_double({.name = "cpu_first"});
  register_mla_prefill_backend("cpu", first);
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, cpu_config()), first);
  auto second = prefill_double({.name = "cpu_second"});
  register_mla_prefill_backend("cpu", second);
  EXPECT_EQ(get_mla_prefill_backend(std::nullopt, cpu_config()), second);
}

TEST_F(SelectorTest, DecodeSelectionMirrorsPrefill) {
  auto cpu = decode_double({.name = "cpu_decode", .block_sizes = {16}});
  auto reference = decode_double({.name = "reference_decode"});
  register_mla_decode_backend("cpu", cpu);
  register_mla_decode_backend("reference", reference);
  SelectorConfig config = cpu_config();
  EXPECT_EQ(get_mla_decode_backend(std::nullopt, config), cpu);
  EXPECT_EQ(get_mla_decode_backend(config), cpu);
  config.block_size = 1;  // cpu_decode refuses, reference takes it
  EXPECT_EQ(auto_select_mla_decode_backend(std::nullopt, config), reference);
  // The prefill registry is untouched by decode registrations.
  EXPECT_FALSE(mla_prefill_backend_registry().is_overridden("cpu"));

  config.decode_backend = "cpu";
  EXPECT_EQ(error_text<ValueError>([&] { get_mla_decode_backend(std::nullopt, config); }),
            "Selected MLA decode backend cpu is not valid for this configuration. Reason: ['block size 1 not "
            "supported (supported: 16)']. Select another MLA decode backend, or leave the decode_backend setting "
            "empty to let lattn choose.");
  config.decode_backend.clear();
  setenv(kDecodeBackendEnvVar, "reference", 1);
  config.block_size = 16;
  EXPECT_EQ(get_mla_decode_backend(std::nullopt, config), reference);
  unsetenv(kDecodeBackendEnvVar);

  config.decode_backend = "CUSTOM";
  EXPECT_EQ(error_text<ValueError>([&] { get_mla_decode_backend(std::nullopt, config); }),
            "MLA decode backend CUSTOM must be registered before use. Use "
            "register_mla_decode_backend(\"CUSTOM\", \"path/to/libyour_backend.so:your_symbol\")");
}

TEST_F(SelectorTest, DecodeNoValidBackendUsesTheDecodeRepr) {
  register_mla_decode_backend("cpu", decode_double({.name = "cpu_decode", .kv_cache_dtypes = {DType::bf16}}));
  register_mla_decode_backend("reference", decode_double({.name = "reference_decode", .max_query_tokens = 1}));
  SelectorConfig config =
      SelectorConfig::for_dims(MlaDims::deepseek_v3(16), DType::bf16, DType::fp8_e4m3, Device::cpu(), 16, 2);
  EXPECT_EQ(error_text<ValueError>([&] { get_mla_decode_backend(std::nullopt, config); }),
            "No valid MLA decode backend found with MLADecodeSelectorConfig(dtype=torch.bfloat16, "
            "kv_cache_dtype=torch.float8_e4m3fn, num_heads=16, kv_lora_rank=512, qk_rope_head_dim=64, block_size=16, "
            "max_query_tokens_per_request=2). Reasons: {cpu: [kv cache dtype torch.float8_e4m3fn not supported], "
            "reference: [2 query tokens per request not supported (max 1)]}. Change the dtype, KV-cache dtype, block "
            "size, latent dimensions, query tokens per request or device to values one of these backends supports, "
            "or register a backend that supports them (see docs/backends.md).");
}

TEST_F(SelectorTest, ExplainGivesEveryMembersVerdict) {
  register_mla_prefill_backend("cpu", prefill_double({.name = "cpu_double"}));
  register_mla_prefill_backend("hopper", "/nonexistent/libhopper.so:hopper_plugin");
  const auto verdicts = explain_mla_prefill_backends(std::nullopt, cpu_config());
  const auto names = mla_prefill_backend_registry().names();
  ASSERT_EQ(verdicts.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(verdicts[i].name, names[i]);
  const auto find = [&](const std::string& n) {
    return *std::find_if(verdicts.begin(), verdicts.end(), [&](const BackendVerdict& v) { return v.name == n; });
  };
  EXPECT_TRUE(find("cpu").valid());
  EXPECT_EQ(find("cpu").path, "object:cpu_double");
  EXPECT_EQ(find("hopper").reasons, std::vector<std::string>{"ImportError"});
  EXPECT_NE(find("hopper").error.find("Cannot load MLA prefill backend plug-in '/nonexistent/libhopper.so'"),
            std::string::npos);
  EXPECT_EQ(find("CUSTOM").reasons, std::vector<std::string>{"not registered"});
  EXPECT_EQ(find("CUSTOM").path, "");
  EXPECT_NE(find("CUSTOM").error.find("must be registered before use"), std::string::npos);
}

TEST_F(SelectorTest, CudaDeviceCapabilityComesFromTheDevice) {
  const SelectorConfig config = gpu_config();
  EXPECT_EQ(selector_device_capability(config), device_capability(0));
  if (!built_with_cuda()) {
    EXPECT_EQ(selector_device_capability(config), std::nullopt);
  }
}

TEST(TV_SELECT, IsDeepSeekR1MlaCompatible) {
  EXPECT_TRUE(is_deepseek_r1_mla_compatible({128, 64, 128}));
  EXPECT_FALSE(is_deepseek_r1_mla_compatible({192, 64, 128}));
  EXPECT_FALSE(is_deepseek_r1_mla_compatible({1, 1, 1}));  // the seeds' defaults for missing attributes
}

TEST(PythonListRepr, MatchesPython) {
  EXPECT_EQ(python_list_repr({}), "[]");
  EXPECT_EQ(python_list_repr({"ImportError"}), "['ImportError']");
  EXPECT_EQ(python_list_repr({"a", "b c"}), "['a', 'b c']");
  EXPECT_EQ(python_list_repr({"it's"}), "[\"it's\"]");
  EXPECT_EQ(python_list_repr({"both ' and \""}), "['both \\' and \"']");
  EXPECT_EQ(python_list_repr({"back\\slash\nnewline"}), "['back\\\\slash\\nnewline']");
}

}  // namespace
}  // namespace lattn
