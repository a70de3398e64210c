// Plug-in backends (lattn/plugin.h): examples/plugin's example_naive is
// loaded by "path:symbol", selected, and run against an independent
// computation; every way a load can fail is refused with a clear ImportError.
#include <gtest/gtest.h>

#include "support/error_text.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "lattn/errors.h"
#include "lattn/plugin.h"
#include "lattn/registry.h"
#include "lattn/selector.h"
#include "support/backend_doubles.h"
#include "support/test_data.h"

namespace lattn {
namespace {

const std::string kPluginDir = LATTN_TEST_PLUGIN_DIR;
const std::string kExampleFile = kPluginDir + "/libexample_naive_prefill.so";
const std::string kExamplePath = kExampleFile + ":lattn_example_naive_plugin";
const std::string kFixturesFile = kPluginDir + "/liblattn_plugin_test_fixtures.so";

using test::error_text;

using test::starts_with;

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv(kPrefillBackendEnvVar);
    test::reset_backend_selection_state();
  }
  void TearDown() override { SetUp(); }
  PrefillBackendRegistry& registry = mla_prefill_backend_registry();
};

SelectorConfig cpu_config(DType dtype) {
  return SelectorConfig::for_dims(MlaDims{2, 8, 3, 2, 4}, dtype, DType::bf16, Device::cpu());
}

TEST_F(PluginTest, TheExampleLoadsByPathAndStatesWhatItSupports) {
  register_mla_prefill_backend("CUSTOM", kExamplePath);
  const auto cls = registry.get_class("CUSTOM");
  ASSERT_NE(cls, nullptr);
  EXPECT_EQ(cls->name(), "example_naive");
  EXPECT_EQ(registry.get_class("CUSTOM"), cls);  // loaded once, the same object after
  EXPECT_EQ(cls->validate_configuration(std::nullopt, cpu_config(DType::f32)), std::vector<std::string>{});
  EXPECT_EQ(cls->validate_configuration(DeviceCapability{9, 0}, cpu_config(DType::bf16)),
            std::vector<std::string>{"compute capability 9.0 not supported"});
  // The same library may also override a built-in member.
  register_mla_prefill_backend("cpu", kExamplePath);
  EXPECT_EQ(registry.get_class("cpu"), cls);
}

TEST_F(PluginTest, SelectedThroughTheEnvironmentVariable) {
  register_mla_prefill_backend("CUSTOM", kExamplePath);
  setenv(kPrefillBackendEnvVar, "CUSTOM", 1);
  const auto cls = get_mla_prefill_backend(cpu_config(DType::bf16));
  EXPECT_EQ(cls, registry.get_class("CUSTOM"));
  EXPECT_EQ(cls->create(PrefillBackendParams{.num_heads = 2,
                                             .scale = 0.5f,
                                             .kv_lora_rank = 8,
                                             .qk_nope_head_dim = 3,
                                             .qk_rope_head_dim = 2,
                                             .v_head_dim = 4,
                                             .dtype = DType::bf16})
                ->name(),
            "example_naive");
}

// ---- running it ------------------------------------------------------------

constexpr int kHeads = 2, kNope = 3, kRope = 2, kV = 4;
constexpr int kQk = kNope + kRope;
constexpr float kScale = 0.37f;

PrefillBackendParams example_params(DType dtype) {
  return {.num_heads = kHeads,
          .scale = kScale,
          .kv_lora_rank = 8,
          .qk_nope_head_dim = kNope,
          .qk_rope_head_dim = kRope,
          .v_head_dim = kV,
          .dtype = dtype};
}

// Attention computed here, independently of the plug-in: fp64, one query
// row at a time; key rows [key_begin[i], key_end[i]) for query row i.
// q [T, N, qk], k/v [rows, N, *] as host f32 copies; out [T, N, V], lse [N, T].
void expected_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int>& key_begin,
                        const std::vector<int>& key_end, const Tensor& out, const Tensor& lse) {
  const auto* qp = q.data_as<const float>();
  const auto* kp = k.data_as<const float>();
  const auto* vp = v.data_as<const float>();
  const int64_t tokens = q.size(0);
  for (int64_t i = 0; i < tokens; ++i) {
    for (int h = 0; h < kHeads; ++h) {
      std::vector<double> logits;
      for (int j = key_begin[i]; j < key_end[i]; ++j) {
        double dot = 0;
        for (int d = 0; d < kQk; ++d) dot += double(qp[(i * kHeads + h) * kQk + d]) * kp[(j * kHeads + h) * kQk + d];
        logits.push_back(dot * kScale);
      }
      double max_logit = -std::numeric_limits<double>::infinity();
      for (double l : logits) max_logit = std::max(max_logit, l);
      double sum = 0;
      for (double l : logits) sum += std::exp(l - max_logit);
      for (int d = 0; d < kV; ++d) {
        double acc = 0;
        for (int j = key_begin[i]; j < key_end[i]; ++j) {
          acc += std::exp(logits[j - key_begin[i]] - max_logit) * vp[(j * kHeads + h) * kV + d];
        }
        out.data_as<float>()[(i * kHeads + h) * kV + d] = logits.empty() ? 0.f : float(acc / sum);
      }
      lse.data_as<float>()[h * tokens + i] =
          logits.empty() ? -std::numeric_limits<float>::infinity() : float(max_logit + std::log(sum));
    }
  }
}

// Two prefills of 3 and 2 new tokens; one context chunk with 4 rows for the
// first and none for the second.
struct TinyBatch {
  int32_t query_start_loc[3] = {0, 3, 5};
  int32_t chunk_cu_seq_lens[1][3] = {{0, 4, 4}};
  int32_t chunk_starts[1][2] = {{0, 0}};
  PrefillMetadata metadata;

  TinyBatch() {
    metadata.num_prefills = 2;
    metadata.num_prefill_tokens = 5;
    metadata.max_query_len = 3;
    metadata.query_start_loc_cpu = metadata.query_start_loc = Tensor(query_start_loc, DType::i32, {3});
    metadata.chunks.num_chunks = 1;
    metadata.chunks.max_context_chunk = 4;
    metadata.chunks.cu_seq_lens_cpu = metadata.chunks.cu_seq_lens = Tensor(chunk_cu_seq_lens, DType::i32, {1, 3});
    metadata.chunks.starts_cpu = metadata.chunks.starts = Tensor(chunk_starts, DType::i32, {1, 2});
    metadata.chunks.max_seq_lens = {4};
    metadata.chunks.seq_tot = {4};
  }
};

TEST_F(PluginTest, CausalNewTokensMatchAnIndependentComputation) {
  register_mla_prefill_backend("CUSTOM", kExamplePath);
  const auto cls = registry.get_class("CUSTOM");
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::mt19937_64 rng(7);
    constexpr int64_t T = 5;
    auto q = OwnedTensor::empty({T, kHeads, kQk}, dtype);
    auto k = OwnedTensor::empty({T, kHeads, kQk}, dtype);
    auto v = OwnedTensor::empty({T, kHeads, kV}, dtype);
    for (const Tensor& t : {q.tensor(), k.tensor(), v.tensor()}) test::fill_uniform(t, rng);
    auto out = OwnedTensor::empty({T, kHeads, kV}, dtype);
    auto lse = OwnedTensor::empty({kHeads, T}, DType::f32);
    test::poison(out);
    test::poison(lse);

    TinyBatch batch;
    const auto backend = cls->create(example_params(dtype));
    backend->prepare_metadata(batch.metadata);
    backend->run_prefill_new_tokens(q, k, v, /*return_softmax_lse=*/true, out, lse);

    auto want_out = OwnedTensor::empty({T, kHeads, kV}, DType::f32);
    auto want_lse = OwnedTensor::empty({kHeads, T}, DType::f32);
    // Causal per request: token i of a request starting at s sees [s, i].
    const std::vector<int> begin{0, 0, 0, 3, 3}, end{1, 2, 3, 4, 5};
    expected_attention(test::to_host_f32(q).tensor(), test::to_host_f32(k).tensor(), test::to_host_f32(v).tensor(),
                       begin, end, want_out, want_lse);
    const auto out_error = test::compare(out, want_out);
    EXPECT_LE(out_error.rel_l2, test::rel_tolerance(dtype)) << out_error.str();
    EXPECT_EQ(out_error.nan_mismatches, 0) << out_error.str();
    // LSE is f32 from f32 accumulation whatever the activation dtype.
    const auto lse_error = test::compare(lse, want_lse);
    EXPECT_LE(lse_error.rel_l2, test::rel_tolerance(DType::f32)) << lse_error.str();
    EXPECT_EQ(lse_error.nan_mismatches, 0) << lse_error.str();

    // Without LSE the output is the same and lse is not touched.
    auto out2 = OwnedTensor::empty({T, kHeads, kV}, dtype);
    test::poison(out2);
    backend->run_prefill_new_tokens(q, k, v, /*return_softmax_lse=*/false, out2, Tensor());
    EXPECT_EQ(test::compare(out2, out).max_abs, 0.0);
  }
}

TEST_F(PluginTest, ContextChunkIsNonCausalAndAnEmptyChunkGivesZeroAndMinusInfinity) {
  register_mla_prefill_backend("CUSTOM", kExamplePath);
  std::mt19937_64 rng(11);
  constexpr int64_t T = 5, rows = 4;
  auto q = OwnedTensor::empty({T, kHeads, kQk}, DType::f32);
  auto k = OwnedTensor::empty({rows, kHeads, kQk}, DType::f32);
  auto v = OwnedTensor::empty({rows, kHeads, kV}, DType::f32);
  for (const Tensor& t : {q.tensor(), k.tensor(), v.tensor()}) test::fill_uniform(t, rng);
  auto out = OwnedTensor::empty({T, kHeads, kV}, DType::f32);
  auto lse = OwnedTensor::empty({kHeads, T}, DType::f32);
  test::poison(out);
  test::poison(lse);

  TinyBatch batch;
  const auto backend = registry.get_class("CUSTOM")->create(example_params(DType::f32));
  backend->prepare_metadata(batch.metadata);
  backend->run_prefill_context_chunk(0, q, k, v, out, lse);

  auto want_out = OwnedTensor::empty({T, kHeads, kV}, DType::f32);
  auto want_lse = OwnedTensor::empty({kHeads, T}, DType::f32);
  // Request 0's three tokens see all 4 chunk rows; request 1 has none.
  expected_attention(q, k, v, {0, 0, 0, 4, 4}, {4, 4, 4, 4, 4}, want_out, want_lse);
  const auto out_error = test::compare(out, want_out);
  EXPECT_LE(out_error.rel_l2, test::rel_tolerance(DType::f32)) << out_error.str();
  EXPECT_EQ(out_error.nan_mismatches, 0) << out_error.str();
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 3; i < 5; ++i) {
      EXPECT_EQ(lse.data_as<float>()[h * T + i], -std::numeric_limits<float>::infinity());
      for (int d = 0; d < kV; ++d) EXPECT_EQ(out.data_as<float>()[(i * kHeads + h) * kV + d], 0.f);
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(lse.data_as<float>()[h * T + i], want_lse.data_as<float>()[h * T + i], 1e-5);
    }
  }
  EXPECT_THROW(backend->run_prefill_context_chunk(1, q, k, v, out, lse), ValueError);
}

TEST_F(PluginTest, TheExampleRefusesWhatItDoesNotDo) {
  register_mla_prefill_backend("CUSTOM", kExamplePath);
  const auto cls = registry.get_class("CUSTOM");
  EXPECT_FALSE(cls->supports_quant_output(QuantKey::fp8_e4m3_static_per_tensor));
  auto backend = cls->create(example_params(DType::f32));
  auto q = OwnedTensor::zeros({5, kHeads, kQk}, DType::f32);
  auto v = OwnedTensor::zeros({5, kHeads, kV}, DType::f32);
  auto lse = OwnedTensor::zeros({kHeads, 5}, DType::f32);
  EXPECT_EQ(error_text<ValueError>([&] { backend->run_prefill_new_tokens(q, q, v, true, v, lse); }),
            "example_naive.run_prefill_new_tokens: no prefill metadata; call prepare_metadata(prefill view) first");
  TinyBatch batch;
  backend->prepare_metadata(batch.metadata);
  auto scale = OwnedTensor::zeros({1}, DType::f32);
  EXPECT_THROW(backend->run_prefill_new_tokens(q, q, v, true, v, lse, scale), NotImplementedError);
  auto wrong = OwnedTensor::zeros({5, kHeads, kQk + 1}, DType::f32);
  EXPECT_THROW(backend->run_prefill_new_tokens(wrong, q, v, true, v, lse), ValueError);
  EXPECT_THROW(cls->create(PrefillBackendParams{.context = {.device = Device::cuda(0)}}), ValueError);
}

// ---- refusals ----------------------------------------------------------------

TEST_F(PluginTest, AMissingFileNamesThePathAndDlerror) {
  register_mla_prefill_backend("CUSTOM", "/nonexistent/dir/libnope.so:lattn_nope_plugin");
  const std::string text = error_text<ImportError>([&] { registry.get_class("CUSTOM"); });
  EXPECT_TRUE(starts_with(text, "Cannot load MLA prefill backend plug-in '/nonexistent/dir/libnope.so': ")) << text;
  EXPECT_NE(text.find("No such file or directory"), std::string::npos) << text;  // dlerror()'s words
  EXPECT_NE(text.find("The file does not exist: build the plug-in or correct the path before the ':'."),
            std::string::npos)
      << text;
}

TEST_F(PluginTest, AFileThatIsNotASharedLibraryIsRefused) {
  const std::string not_a_library = std::string(LATTN_SOURCE_DIR) + "/CMakeLists.txt";
  register_mla_prefill_backend("CUSTOM", not_a_library + ":anything");
  const std::string text = error_text<ImportError>([&] { registry.get_class("CUSTOM"); });
  EXPECT_TRUE(starts_with(text, "Cannot load MLA prefill backend plug-in '" + not_a_library + "': ")) << text;
  EXPECT_NE(text.find("Check that it is a shared library built for this machine"), std::string::npos) << text;
}

TEST_F(PluginTest, AMissingSymbolIsRefused) {
  register_mla_prefill_backend("CUSTOM", kExampleFile + ":no_such_entry_point");
  const std::string text = error_text<ImportError>([&] { registry.get_class("CUSTOM"); });
  EXPECT_TRUE(
      starts_with(text, "MLA prefill backend plug-in '" + kExampleFile + "' has no symbol 'no_such_entry_point' ("))
      << text;
  EXPECT_NE(text.find("). Correct the name after the ':', or export it from the plug-in as LATTN_PLUGIN_EXPORT "
                      "const LattnPluginDescriptor* no_such_entry_point()."),
            std::string::npos)
      << text;
}

TEST_F(PluginTest, AWrongApiVersionIsRefused) {
  register_mla_prefill_backend("CUSTOM", kFixturesFile + ":lattn_wrong_api_version_plugin");
  EXPECT_EQ(error_text<ImportError>([&] { registry.get_class("CUSTOM"); }),
            "MLA prefill backend plug-in '" + kFixturesFile +
                "' (symbol 'lattn_wrong_api_version_plugin') was built for lattn plug-in API version " +
                std::to_string(LATTN_PLUGIN_API_VERSION + 1) + ", but this lattn needs version " +
                std::to_string(LATTN_PLUGIN_API_VERSION) + ". Rebuild the plug-in against this lattn's headers.");
}

TEST_F(PluginTest, ANullDescriptorIsRefused) {
  register_mla_decode_backend("CUSTOM", kFixturesFile + ":lattn_null_descriptor_plugin");
  EXPECT_EQ(error_text<ImportError>([&] { mla_decode_backend_registry().get_class("CUSTOM"); }),
            "MLA decode backend plug-in '" + kFixturesFile +
                "': its entry point 'lattn_null_descriptor_plugin' returned no descriptor (nullptr). Fix the plug-in "
                "to return a LattnPluginDescriptor.");
}

TEST_F(PluginTest, APrefillOnlyPluginIsRefusedAsADecodeBackend) {
  register_mla_decode_backend("CUSTOM", kExamplePath);
  EXPECT_EQ(error_text<ImportError>([&] { mla_decode_backend_registry().get_class("CUSTOM"); }),
            "MLA decode backend plug-in '" + kExamplePath +
                "' (example_naive) provides no decode backend class (its descriptor's decode_class is null). It "
                "provides the other kind: register it with register_mla_prefill_backend instead.");
}

// The selector turns a load failure into the seed's ['ImportError'] reason
// and keeps the loader's explanation.
TEST_F(PluginTest, TheSelectorReportsAPluginLoadFailure) {
  register_mla_prefill_backend("CUSTOM", kFixturesFile + ":lattn_wrong_api_version_plugin");
  SelectorConfig config = cpu_config(DType::bf16);
  config.prefill_backend = "CUSTOM";
  const std::string text = error_text<ValueError>([&] { get_mla_prefill_backend(config); });
  EXPECT_TRUE(starts_with(text,
                          "Selected MLA prefill backend CUSTOM is not valid for this configuration. Reason: "
                          "['ImportError']. MLA prefill backend plug-in '" +
                              kFixturesFile + "' (symbol 'lattn_wrong_api_version_plugin') was built for"))
      << text;
}

}  // namespace
}  // namespace lattn
