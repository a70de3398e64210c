// Timing cases on a device; the CPU runner (see device_runner.h).
#include "harness/device_runner.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "harness/case_step.h"
#include "lattn/errors.h"

namespace lattn::bench {
namespace {

class CpuRunner final : public DeviceRunner {
 public:
  explicit CpuRunner(int threads) : threads_(threads > 0 ? threads : omp_get_max_threads()) {}
  Device device() const override { return Device::cpu(); }
  Ceilings measure_ceilings(const CeilingOptions& options) override { return measure_cpu_ceilings(threads_, options); }
  void synchronize() override {}

 private:
  int threads_;
};

}  // namespace

double DeviceRunner::time_us(const std::function<void()>& work) {
  const auto t0 = std::chrono::steady_clock::now();
  work();
  synchronize();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

std::unique_ptr<DeviceRunner> make_cpu_runner(int num_threads) { return std::make_unique<CpuRunner>(num_threads); }

#ifndef LATTN_BENCH_WITH_CUDA
std::unique_ptr<DeviceRunner> make_cuda_runner(int index) {
  throw ValueError("the benchmark harness was built without CUDA: no runner for cuda:" + std::to_string(index));
}
#endif

std::unique_ptr<DeviceRunner> make_runner(Device device, int num_threads) {
  return device.is_cpu() ? make_cpu_runner(num_threads) : make_cuda_runner(device.index);
}

Measurement time_case(DeviceRunner& runner, const BenchCase& c, const RunOptions& options) {
  if (!(c.device == runner.device())) {
    throw ValueError("time_case: case '" + c.name() + "' is for " + device_name(c.device) + " but the runner times " +
                     device_name(runner.device()));
  }
  if (options.repeats < 1 || options.warmup < 0) {
    throw ValueError("time_case: need repeats >= 1 and warmup >= 0, got " + std::to_string(options.repeats) + " and " +
                     std::to_string(options.warmup));
  }
  const CaseStep step = build_case(c, options.seed);
  for (int i = 0; i < options.warmup; ++i) runner.time_us(step.run);
  Measurement m;
  for (int i = 0; i < options.repeats; ++i) {
    if (options.pair_ceilings) m.paired_ceilings.push_back(runner.measure_ceilings(options.pair_options));
    m.samples_us.push_back(runner.time_us(step.run));
  }
  m.kernel_label = step.kernel_label();
  std::vector<double> sorted = m.samples_us;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  m.median_us = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  m.min_us = sorted.front();
  m.max_us = sorted.back();
  return m;
}

}  // namespace lattn::bench
