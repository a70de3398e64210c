// The selector's log lines (the seeds' logger.info_once texts). Each text is
// logged once per process, so every case here produces texts no other case
// in this executable produces.
#include <gtest/gtest.h>

#include <cstdlib>

#include "lattn/log.h"
#include "lattn/registry.h"
#include "lattn/selector.h"
#include "support/backend_doubles.h"

namespace lattn {
namespace {

using test::cpu_only;
using test::decode_double;
using test::prefill_double;

class SelectorLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv(kPrefillBackendEnvVar);
    unsetenv(kDecodeBackendEnvVar);
    test::reset_backend_selection_state();
    saved_level_ = log_level();
    set_log_level(LogLevel::info);
    set_log_sink(&log_);
  }
  void TearDown() override {
    set_log_sink(nullptr);
    set_log_level(saved_level_);
    test::reset_backend_selection_state();
  }
  std::string log_;
  LogLevel saved_level_ = LogLevel::warning;
};

SelectorConfig config_on(Device device) {
  return SelectorConfig::for_dims(MlaDims::deepseek_v3(16), DType::bf16, DType::bf16, device);
}

TEST_F(SelectorLogTest, NoDeviceCapabilityNamesTheCpuBackend) {
  register_mla_prefill_backend("cpu", prefill_double({.name = "cpu_double", .capability = cpu_only}));
  get_mla_prefill_backend(std::nullopt, config_on(Device::cpu()));
  EXPECT_EQ(log_, "INFO Device capability not available, using cpu MLA prefill backend.\n");
  // Once only.
  clear_mla_backend_selection_cache();
  get_mla_prefill_backend(std::nullopt, config_on(Device::cpu()));
  EXPECT_EQ(log_, "INFO Device capability not available, using cpu MLA prefill backend.\n");
}

TEST_F(SelectorLogTest, AutomaticChoiceOnAGpuIsLogged) {
  register_mla_prefill_backend("hopper", prefill_double({.name = "hopper_double"}));
  get_mla_prefill_backend(DeviceCapability{9, 0}, config_on(Device::cuda(0)));
  EXPECT_EQ(log_, "INFO Using hopper MLA prefill backend.\n");
}

TEST_F(SelectorLogTest, ExplicitChoiceIsLogged) {
  register_mla_decode_backend("reference", decode_double({.name = "reference_decode"}));
  SelectorConfig config = config_on(Device::cpu());
  config.decode_backend = "reference";
  get_mla_decode_backend(std::nullopt, config);
  EXPECT_EQ(log_, "INFO Using reference MLA decode backend.\n");
}

TEST_F(SelectorLogTest, AnUnresolvableMemberIsWarnedAboutDuringTheWalk) {
  register_mla_prefill_backend("cuda", "/nonexistent/libcuda_prefill.so:cuda_prefill_plugin");
  register_mla_prefill_backend("reference", prefill_double({.name = "reference_double"}));
  get_mla_prefill_backend(DeviceCapability{8, 0}, config_on(Device::cuda(0)));
  EXPECT_EQ(log_.rfind("WARNING Cannot load MLA prefill backend plug-in '/nonexistent/libcuda_prefill.so': ", 0), 0u)
      << log_;
  EXPECT_NE(log_.find("\nINFO Using reference MLA prefill backend.\n"), std::string::npos) << log_;
}

}  // namespace
}  // namespace lattn
