// tools/cpu_info.h — what `lattn info` says about the host CPU.
#pragma once

#include <string>
#include <vector>

namespace lattn::cli {

struct CpuInfo {
  std::string model;                  // "/proc/cpuinfo" model name, or "unknown"
  std::vector<std::string> features;  // the SIMD features that matter to lattn's kernels, present ones only
  int hardware_threads = 0;           // std::thread::hardware_concurrency()
  int openmp_max_threads = 0;         // what an OpenMP parallel region gets (OMP_NUM_THREADS applied)
};

CpuInfo query_cpu_info();

}  // namespace lattn::cli
