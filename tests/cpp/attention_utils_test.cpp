// The seed's small v1 utilities: KV-cache layout selection (TV_LAYOUT) and
// per-layer hyperparameters (TV_GLOBALHP).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "lattn/errors.h"
#include "lattn/kv_cache_layout.h"
#include "lattn/log.h"
#include "lattn/per_layer_parameters.h"

namespace lattn {
namespace {

// Each case starts from a clean global state and restores it.
class KvCacheLayout : public ::testing::Test {
 protected:
  void SetUp() override { reset(); }
  void TearDown() override {
    reset();
    set_log_sink(nullptr);
    set_log_level(LogLevel::warning);
  }
  static void reset() {
    unsetenv("LATTN_KV_CACHE_LAYOUT");
    set_kv_cache_layout(std::nullopt);
    clear_kv_cache_layout_cache();
  }
};

TEST_F(KvCacheLayout, TV_LAYOUT) {
  // Environment unset: the connector's "NHD".
  EXPECT_EQ(get_kv_connector_cache_layout(), "NHD");
  EXPECT_EQ(get_kv_cache_layout(), "NHD");

  // Environment "HND" wins over the connector, with one info log.
  clear_kv_cache_layout_cache();
  setenv("LATTN_KV_CACHE_LAYOUT", "HND", 1);
  std::string log;
  set_log_sink(&log);
  set_log_level(LogLevel::info);
  EXPECT_EQ(get_kv_cache_layout(), "HND");
  EXPECT_NE(log.find("`LATTN_KV_CACHE_LAYOUT` environment variable detected. Setting KV cache layout to HND."),
            std::string::npos)
      << log;
  unsetenv("LATTN_KV_CACHE_LAYOUT");

  // An override set before the first get wins.
  clear_kv_cache_layout_cache();
  set_kv_cache_layout("HND");
  EXPECT_EQ(get_kv_cache_layout(), "HND");

  // After the first get the value is memoized until the cache is cleared.
  set_kv_cache_layout("NHD");
  EXPECT_EQ(get_kv_cache_layout(), "HND");
  clear_kv_cache_layout_cache();
  EXPECT_EQ(get_kv_cache_layout(), "NHD");

  // The override beats the environment.
  setenv("LATTN_KV_CACHE_LAYOUT", "HND", 1);
  clear_kv_cache_layout_cache();
  EXPECT_EQ(get_kv_cache_layout(), "NHD");
}

TEST_F(KvCacheLayout, RefusesUnknownLayouts) {
  EXPECT_THROW(set_kv_cache_layout("NCHW"), ValueError);
  setenv("LATTN_KV_CACHE_LAYOUT", "bogus", 1);
  try {
    get_kv_cache_layout();
    ADD_FAILURE() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("\"bogus\""), std::string::npos) << e.what();
  }
}

TEST(PerLayerParameters, TV_GLOBALHP) {
  const PerLayerParameters common{-1, std::nullopt, 0.125};
  EXPECT_EQ(infer_global_hyperparameters({{"layers.0", common}, {"layers.1", common}}), common);

  try {
    infer_global_hyperparameters({{"layers.0", common}, {"layers.1", {-1, std::nullopt, 0.1}}});
    ADD_FAILURE() << "no exception";
  } catch (const AssertionError& e) {
    EXPECT_STREQ(e.what(),
                 "FlashInfer backend currently only supports models in which all layers share the same values for "
                 "the following hyperparameters: `window_left`, `logits_soft_cap`, `sm_scale`.");
  }
  try {
    infer_global_hyperparameters({});
    ADD_FAILURE() << "no exception";
  } catch (const AssertionError& e) {
    EXPECT_STREQ(e.what(), "No attention layers found in the model.");
  }
  // A soft cap that differs only in presence is a difference.
  EXPECT_THROW(infer_global_hyperparameters({{"a", common}, {"b", {-1, 30.0, 0.125}}}), AssertionError);

  AttentionLayerHyperparameters windowed;
  windowed.sliding_window = std::make_pair(127, 0);
  windowed.scale = 0.125;
  AttentionLayerHyperparameters plain;
  plain.logits_soft_cap = 50.0;
  plain.scale = 0.25;
  const PerLayerParameterMap params = get_per_layer_parameters({{"w", windowed}, {"p", plain}});
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "w");
  EXPECT_EQ(params[0].second, (PerLayerParameters{127, std::nullopt, 0.125}));
  EXPECT_EQ(params[1].second, (PerLayerParameters{-1, 50.0, 0.25}));
}

}  // namespace
}  // namespace lattn
