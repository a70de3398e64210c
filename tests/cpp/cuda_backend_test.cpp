// The `cuda` decode backend inside MlaAttention, through the shared backend
// test driver (support/backend_driver.h): every forward case (mixed batches,
// hostile data, DeepSeek and other dims, block sizes 1/16/64, heads 1..128,
// decode query lengths 1..4, fp8 caches, chunked context, padded rows, fp8
// output) runs on the GPU and is compared with the `reference` backend on the
// CPU. Prefill uses the `cuda` prefill backend where it exists and serves
// the case, `reference` otherwise. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "lattn/backend.h"
#include "lattn/registry.h"
#include "lattn/selector.h"
#include "support/backend_driver.h"
#include "support/gpu.h"

namespace lattn {
namespace {

const Device kGpu = Device::cuda(0);

SelectorConfig config_of(const test::BackendCase& c) {
  int max_q = 1;
  for (const auto& d : c.decodes) max_q = std::max(max_q, d.query_len);
  return SelectorConfig::for_dims(c.dims, c.dtype, c.kv_cache_dtype, kGpu, c.block_size, max_q);
}

// "cuda" when a cuda prefill backend is registered and serves the case.
std::string prefill_backend_for(const test::BackendCase& c) {
  try {
    const auto cls = mla_prefill_backend_registry().get_class("cuda");
    if (cls->validate_configuration(device_capability(0), config_of(c)).empty()) return "cuda";
  } catch (const std::exception&) {
    // not registered in this build: the reference serves prefill
  }
  return "reference";
}

// Parameter: the decode backend ("cuda", or "hopper" on sm90) and the case.
class CudaBackendDriver : public ::testing::TestWithParam<std::tuple<const char*, test::BackendCase>> {};

TEST_P(CudaBackendDriver, MatchesReference) {
  LATTN_REQUIRE_GPU();
  const std::string name = std::get<0>(GetParam());
  const test::BackendCase& c = std::get<1>(GetParam());
  const auto decode = mla_decode_backend_registry().get_class(name);
  if (!decode->is_available() || !decode->supports_compute_capability(device_capability(0))) {
    GTEST_SKIP() << name << " does not run on this GPU";
  }
  const auto reasons = decode->validate_configuration(device_capability(0), config_of(c));
  if (!reasons.empty()) {
    // The only configuration the cuda (and hopper) decode backend declines: f32 activations.
    ASSERT_EQ(reasons.size(), 1u) << reasons[0];
    EXPECT_EQ(reasons[0], "dtype torch.float32 not supported");
    GTEST_SKIP() << name << " decode declines " << c.name << ": " << reasons[0];
  }
  const std::string prefill = prefill_backend_for(c);
  SCOPED_TRACE("prefill backend: " + prefill + ", decode backend: " + name);
  EXPECT_TRUE(test::check(test::run_backend_case(c, prefill, name, kGpu)));
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaBackendDriver,
                         ::testing::Combine(::testing::Values("cuda", "hopper"),
                                            ::testing::ValuesIn(test::all_forward_cases())),
                         [](const ::testing::TestParamInfo<std::tuple<const char*, test::BackendCase>>& info) {
                           return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
                         });

// The selector picks hopper for decode on sm90 (H100/H200), cuda on other sm80+ GPUs.
TEST(CudaBackendSelection, AutoSelectedOnTheGpu) {
  LATTN_REQUIRE_GPU();
  const SelectorConfig cfg = SelectorConfig::for_dims(MlaDims::deepseek_v3(16), DType::bf16, DType::bf16, kGpu, 64, 1);
  const auto capability = device_capability(0);
  const std::string chosen = auto_select_mla_decode_backend(capability, cfg)->name();
  EXPECT_EQ(chosen, capability && capability->major == 9 ? "hopper" : "cuda");
}

}  // namespace
}  // namespace lattn
