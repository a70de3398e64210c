// bench/harness/device_runner.h — timing cases on one device (public API only).
//
// A DeviceRunner knows one device kind: how to measure its ceilings, how to
// wait for its queued work, and how to time a region. time_case() is the
// same for every device: it builds the case's inputs on runner.device()
// (random data generated on the host and copied there, metadata views with
// both host and device copies), creates the backend by name through lattn's
// registry, plans once, warms up, then times `repeats` runs.
//
// The CPU runner lives here; a GPU runner (CUDA events, device copies for the
// bandwidth ceiling, a cuBLAS GEMM for the matrix rate) implements the same
// interface in the CUDA build.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/bench_case.h"
#include "harness/ceilings.h"
#include "lattn/device.h"

namespace lattn::bench {

class DeviceRunner {
 public:
  virtual ~DeviceRunner() = default;
  virtual Device device() const = 0;
  // Measures this device's ceilings now (takes about a second on a CPU).
  virtual Ceilings measure_ceilings(const CeilingOptions& options) = 0;
  // Blocks until work queued on the device has finished (the CPU: no-op).
  virtual void synchronize() = 0;
  // Microseconds one call of `work` takes, its device work included.
  // Default: host clock around work() + synchronize().
  virtual double time_us(const std::function<void()>& work);
};

// The CPU, with `num_threads` threads for the ceilings (0 = all).
std::unique_ptr<DeviceRunner> make_cpu_runner(int num_threads = 0);

// CUDA device `index`: CUDA events around each step; ceilings = a 2 GiB
// device-to-device copy and cuBLAS bf16/f16 8192³ GEMMs (harness/cuda_runner.cu).
// Throws ValueError when the harness was built without CUDA.
std::unique_ptr<DeviceRunner> make_cuda_runner(int index = 0);

// The runner for `device` (cpu: make_cpu_runner(num_threads); cuda:N: make_cuda_runner(N)).
std::unique_ptr<DeviceRunner> make_runner(Device device, int num_threads = 0);

struct RunOptions {
  int warmup = 2;        // untimed runs first (caches, page faults, thread pools)
  int repeats = 10;      // timed runs; the median is reported
  uint64_t seed = 1234;  // random inputs
  // Shared machines: re-measure the ceilings (short probes) right before
  // every timed repeat, so each sample is judged against the share of the
  // machine it actually had (make_row then reports the median of the
  // per-sample roofline fractions).
  bool pair_ceilings = false;
  CeilingOptions pair_options{0.03, 1, size_t(64) << 20};
};

struct Measurement {
  std::vector<double> samples_us;         // one per repeat, in run order
  std::vector<Ceilings> paired_ceilings;  // one per repeat with RunOptions::pair_ceilings, else empty
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;         // with min_us: the spread of the repeats
  std::string kernel_label;  // what the backend ran, after the timed runs (its kernel_label())
};

// Times `c` on `runner` (c.device must be runner.device()). Throws what the
// registry, the backend or the case's validation throws.
Measurement time_case(DeviceRunner& runner, const BenchCase& c, const RunOptions& options = {});

}  // namespace lattn::bench
