// The `cpu` backend's own sweep: its prefill and decode together (through
// MlaAttention) against the `reference` backends on every case of the shared
// backend driver, for every instruction-set path this CPU can run (forced in
// turn) and for 1 and all threads. (Every registered backend, the `cpu` ones
// included, also runs every case alone against `reference` in
// backend_driver_test, which walks the registry.)
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <tuple>

#include "lattn/cpu.h"
#include "support/backend_driver.h"

namespace lattn::test {
namespace {

using Param = std::tuple<CpuIsa, bool, BackendCase>;

class CpuVsReference : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const CpuIsa isa = std::get<0>(GetParam());
    const auto supported = cpu_isas_supported();
    if (std::find(supported.begin(), supported.end(), isa) == supported.end()) {
      GTEST_SKIP() << "this CPU cannot run the " << cpu_isa_name(isa) << " path";
    }
    set_cpu_isa(isa);
    previous_threads_ = omp_get_max_threads();
    // The backends use all of OpenMP's threads (RunContext::num_threads = 0).
    omp_set_num_threads(std::get<1>(GetParam()) ? std::max(2, previous_threads_) : 1);
  }
  void TearDown() override {
    set_cpu_isa(std::nullopt);
    omp_set_num_threads(previous_threads_);
  }
  int previous_threads_ = 1;
};

TEST_P(CpuVsReference, OutputMatches) {
  const CaseResult result = run_backend_case(std::get<2>(GetParam()), "cpu", "cpu");
  EXPECT_TRUE(check(result));
}

INSTANTIATE_TEST_SUITE_P(AllForwardCases, CpuVsReference,
                         ::testing::Combine(::testing::Values(CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512,
                                                              CpuIsa::avx512_bf16),
                                            ::testing::Bool(), ::testing::ValuesIn(all_forward_cases())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(cpu_isa_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_all_threads_" : "_1_thread_") +
                                  std::get<2>(info.param).name;
                         });

}  // namespace
}  // namespace lattn::test
