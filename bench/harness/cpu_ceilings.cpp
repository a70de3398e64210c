// CPU ceilings: FMA and bf16-dot peaks and a STREAM triad (see ceilings.h).
// The probes carry their own target attributes, so the harness stays
// baseline x86-64 and probes only what __builtin_cpu_supports reports.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "harness/ceilings.h"
#include "lattn/cpu.h"

namespace lattn::bench {
namespace {

using Clock = std::chrono::steady_clock;

// 24 independent accumulators: FMA latency (4 cycles) x 2 pipes x 3 to spare.
constexpr int kChains = 24;

// Each probe runs `iterations` rounds of kChains operations per thread and
// returns a value that depends on every result, so nothing is optimized away.
__attribute__((target("avx512f"))) float fma_probe_avx512(int64_t iterations) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}

__attribute__((target("avx512f,avx512bf16"))) float dot_probe_avx512bf16(int64_t iterations) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3000);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}

__attribute__((target("avx2,fma"))) float fma_probe_avx2(int64_t iterations) {
  __m256 acc[kChains / 2];  // 16 ymm registers
  for (int i = 0; i < kChains / 2; ++i) acc[i] = _mm256_set1_ps(float(i) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains / 2; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  alignas(32) float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < kChains / 2; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_store_ps(out, s);
  return out[0];
}

float mul_add_probe_scalar(int64_t iterations) {
  float acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = float(i) * 1e-3f;
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = acc[i] * 0.999999f + 1e-7f;
  }
  float s = 0;
  for (float x : acc) s += x;
  return s;
}

struct Probe {
  float (*run)(int64_t);
  double flops_per_iteration;  // per thread
};

// GFLOP/s of `probe` over `threads` threads, best of `trials`; the iteration
// count is calibrated so one trial takes about `seconds`.
double measure_probe(const Probe& probe, int threads, const CeilingOptions& options) {
  volatile float sink = 0;
  int64_t iterations = 1 << 16;
  for (;;) {  // calibrate on one thread
    const auto t0 = Clock::now();
    sink = sink + probe.run(iterations);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > options.seconds_per_probe / 8) {
      iterations = int64_t(double(iterations) * options.seconds_per_probe / s) + 1;
      break;
    }
    iterations *= 4;
  }
  // More threads than processors time-share them: shrink each thread's work
  // so a trial still takes about `seconds`, whatever --threads says.
  const int processors = std::max(1, omp_get_num_procs());
  if (threads > processors) iterations = std::max<int64_t>(1, iterations * processors / threads);
  double best = 0;
  for (int trial = 0; trial < options.trials; ++trial) {
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
    { sink = sink + probe.run(iterations); }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, double(threads) * double(iterations) * probe.flops_per_iteration / s / 1e9);
  }
  return best;
}

double measure_triad_gbps(int threads, const CeilingOptions& options) {
  const size_t n = options.triad_bytes / (3 * sizeof(double));
  std::vector<double> a(n), b(n), c(n);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < int64_t(n); ++i) {  // first touch by the threads that use the pages
    a[size_t(i)] = 0.0;
    b[size_t(i)] = 1.0;
    c[size_t(i)] = 2.0;
  }
  double best = 0;
  const double scalar = 3.0;
  for (int trial = 0; trial < std::max(options.trials, 5); ++trial) {
    const auto t0 = Clock::now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < int64_t(n); ++i) a[size_t(i)] = b[size_t(i)] + scalar * c[size_t(i)];
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (trial > 0) best = std::max(best, 3.0 * sizeof(double) * double(n) / s / 1e9);  // trial 0 warms up
  }
  volatile double keep = a[n / 2];
  (void)keep;
  return best;
}

std::string cpu_model_name() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown CPU";
}

}  // namespace

double Ceilings::compute_gflops(DType dtype) const {
  if (dtype == DType::bf16 && bf16_gflops > 0) return bf16_gflops;
  if (dtype == DType::f16 && f16_gflops > 0) return f16_gflops;
  return f32_gflops;
}

Ceilings best_of(const Ceilings& a, const Ceilings& b) {
  Ceilings c = a;
  c.bandwidth_gbps = std::max(a.bandwidth_gbps, b.bandwidth_gbps);
  c.f32_gflops = std::max(a.f32_gflops, b.f32_gflops);
  c.f16_gflops = std::max(a.f16_gflops, b.f16_gflops);
  c.bf16_gflops = std::max(a.bf16_gflops, b.bf16_gflops);
  return c;
}

Ceilings measure_cpu_ceilings(int threads, const CeilingOptions& options) {
  if (threads <= 0) threads = omp_get_max_threads();
  const CpuIsa best = cpu_isa_best();
  Ceilings c;
  c.device = "cpu";
  c.threads = threads;
  c.device_name = cpu_model_name() + " (" + std::to_string(threads) + " threads, " + cpu_isa_name(best) + ")";
  Probe fma{mul_add_probe_scalar, 2.0 * kChains};
  if (best >= CpuIsa::avx512) {
    fma = {fma_probe_avx512, 2.0 * 16 * kChains};
  } else if (best >= CpuIsa::avx2) {
    fma = {fma_probe_avx2, 2.0 * 8 * (kChains / 2)};
  }
  c.f32_gflops = measure_probe(fma, threads, options);
  // One vdpbf16ps: 16 lanes x 2 products x (multiply + add).
  if (best >= CpuIsa::avx512_bf16)
    c.bf16_gflops = measure_probe({dot_probe_avx512bf16, 64.0 * kChains}, threads, options);
  c.bandwidth_gbps = measure_triad_gbps(threads, options);
  return c;
}

}  // namespace lattn::bench
