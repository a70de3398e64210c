// Host CPU model, SIMD features and thread counts.
#include "cpu_info.h"

#include <fstream>
#include <thread>

#include <omp.h>

namespace lattn::cli {
namespace {

std::string read_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

}  // namespace

CpuInfo query_cpu_info() {
  CpuInfo info;
  info.model = read_cpu_model();
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // The ISA levels lattn's CPU kernels are compiled for (*_avx2.cpp, *_avx512.cpp) and what they use.
  if (__builtin_cpu_supports("sse4.2")) info.features.push_back("sse4.2");
  if (__builtin_cpu_supports("avx")) info.features.push_back("avx");
  if (__builtin_cpu_supports("avx2")) info.features.push_back("avx2");
  if (__builtin_cpu_supports("fma")) info.features.push_back("fma");
  if (__builtin_cpu_supports("f16c")) info.features.push_back("f16c");
  if (__builtin_cpu_supports("avx512f")) info.features.push_back("avx512f");
  if (__builtin_cpu_supports("avx512bw")) info.features.push_back("avx512bw");
  if (__builtin_cpu_supports("avx512vl")) info.features.push_back("avx512vl");
  if (__builtin_cpu_supports("avx512bf16")) info.features.push_back("avx512bf16");
  if (__builtin_cpu_supports("avx512fp16")) info.features.push_back("avx512fp16");
  if (__builtin_cpu_supports("amx-bf16")) info.features.push_back("amx-bf16");
#endif
  info.hardware_threads = int(std::thread::hardware_concurrency());
  info.openmp_max_threads = omp_get_max_threads();
  return info;
}

}  // namespace lattn::cli
