// The `reference` backends (run through MlaAttention) against the naive f64
// computation of the backend driver, on every forward case: mixed batches,
// hostile data, all dims, dtypes and block sizes.
#include <gtest/gtest.h>

#include <iostream>

#include "support/backend_driver.h"

namespace lattn::test {
namespace {

class ReferenceVsNaive : public ::testing::TestWithParam<BackendCase> {};

TEST_P(ReferenceVsNaive, OutputMatches) {
  const CaseResult result = run_reference_vs_naive(GetParam());
  EXPECT_TRUE(check(result));
  std::cout << result.str() << "\n";
}

INSTANTIATE_TEST_SUITE_P(AllForwardCases, ReferenceVsNaive, ::testing::ValuesIn(all_forward_cases()),
                         [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; });

}  // namespace
}  // namespace lattn::test
