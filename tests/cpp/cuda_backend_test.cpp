// The CUDA backends together inside MlaAttention: the selector's choice on
// the GPU, and the `cuda` prefill and decode backends in one step (each alone
// against `reference` runs in backend_driver_test, which walks the registry).
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

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

// The selector's pair for the GPU (prefill and decode on the device in one
// step, as engines run them) on every case both serve, against `reference`.
TEST(CudaBackendPair, SelectedPairMatchesReference) {
  LATTN_REQUIRE_GPU();
  const auto capability = device_capability(0);
  int ran = 0;
  for (const test::BackendCase& c : test::all_forward_cases()) {
    const SelectorConfig cfg = config_of(c);
    const auto decode = auto_select_mla_decode_backend(capability, cfg);
    const auto prefill = auto_select_mla_prefill_backend(capability, cfg);
    if (decode->name() == "reference" || prefill->name() == "reference") continue;
    SCOPED_TRACE(c.str() + " with prefill " + prefill->name() + ", decode " + decode->name());
    EXPECT_TRUE(test::check(test::run_backend_case(c, prefill->name(), decode->name(), kGpu)));
    ++ran;
  }
  EXPECT_GT(ran, 0) << "the selector chose a GPU pair for no case";
}

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
