// tools/serving/stats.h — summary statistics of the serving run.
#pragma once

#include <vector>

namespace lattn::serving {

// The q-quantile (0 <= q <= 1) by linear interpolation between closest ranks
// (numpy's default); 0 for an empty sample.
double percentile(std::vector<double> values, double q);
double mean(const std::vector<double>& values);

}  // namespace lattn::serving
