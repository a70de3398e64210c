// bench/harness/ceilings.h — the measured limits a case is judged against
// (public API only). Every report divides by ceilings measured in the same
// run on the same machine: machines are shared and noisy, datasheets lie.
#pragma once

#include <string>

#include "lattn/dtype.h"

namespace lattn::bench {

struct Ceilings {
  std::string device;         // "cpu", "cuda:0"
  std::string device_name;    // "AMD EPYC (2 threads, avx512bf16)", "NVIDIA H200"
  int threads = 0;            // CPU: threads the peaks were measured with
  double bandwidth_gbps = 0;  // CPU: STREAM triad; GPU: device-to-device copy (bytes read + written)
  double f32_gflops = 0;      // CPU: f32 FMA peak over all threads; GPU: f32 rate (0: not measured)
  double f16_gflops = 0;      // f16 matrix rate; 0: none (CPU: the kernels run f16 as f32)
  double bf16_gflops = 0;     // CPU: bf16 dot-product (vdpbf16ps) peak; GPU: bf16 GEMM; 0: none

  // The compute peak a case with activations of `dtype` is judged by: the
  // dtype's own rate where the device has one, else the f32 rate.
  double compute_gflops(DType dtype) const;
};

// Field by field, the larger of two measurements of the same device (e.g.
// one taken before and one after the cases): on a shared machine a probe
// that lost its core to another process under-reports, and a ceiling must
// not be too low.
Ceilings best_of(const Ceilings& a, const Ceilings& b);

struct CeilingOptions {
  double seconds_per_probe = 0.2;  // per compute probe (best of `trials`)
  int trials = 3;
  size_t triad_bytes = size_t(192) << 20;  // all three arrays: well past the last-level cache
};

// The CPU's ceilings with `threads` threads (0 = all of OpenMP's): an FMA
// loop with enough independent accumulators to cover the FMA latency (the
// widest vector ISA the CPU has), the same with vdpbf16ps when the CPU has
// AVX512-BF16, and a STREAM triad a[i] = b[i] + s * c[i] over f64 arrays
// (24 bytes per element: two reads and a write; write-allocate not counted,
// as STREAM does). Best of `trials` for each.
Ceilings measure_cpu_ceilings(int threads = 0, const CeilingOptions& options = {});

}  // namespace lattn::bench
