// Percentiles as numpy computes them (linear interpolation between ranks).
#include "serving/stats.h"

#include <gtest/gtest.h>

namespace lattn::serving {
namespace {

TEST(Stats, PercentileInterpolatesLikeNumpy) {
  const std::vector<double> v = {4, 1, 3, 2};  // sorted: 1 2 3 4
  EXPECT_DOUBLE_EQ(percentile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 0.5), 2.5);    // numpy.percentile([1,2,3,4], 50) == 2.5
  EXPECT_DOUBLE_EQ(percentile(v, 0.99), 3.97);  // 1 + 0.99 * 3 = rank 2.97
  EXPECT_DOUBLE_EQ(percentile(v, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(percentile({}, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 0.99), 7.0);
  EXPECT_DOUBLE_EQ(mean(v), 2.5);
  EXPECT_DOUBLE_EQ(mean({}), 0.0);
}

}  // namespace
}  // namespace lattn::serving
