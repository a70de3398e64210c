// src/cuda/common/cuda_check.h — every CUDA call and launch is checked; a
// failure becomes lattn::RuntimeError naming the operation and the CUDA error.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "lattn/errors.h"

namespace lattn::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  throw RuntimeError(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) + " (" +
                     cudaGetErrorString(err) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace lattn::cuda

// Checks a CUDA runtime call: LATTN_CUDA_CHECK(cudaMalloc(&p, n));
#define LATTN_CUDA_CHECK(call)                                                                             \
  do {                                                                                                     \
    cudaError_t lattn_err_ = (call);                                                                       \
    if (lattn_err_ != cudaSuccess) ::lattn::cuda::throw_cuda_error(lattn_err_, #call, __FILE__, __LINE__); \
  } while (0)

// Checks the last launch: kernel<<<...>>>(...); LATTN_CUDA_CHECK_LAUNCH("gather_cache");
#define LATTN_CUDA_CHECK_LAUNCH(name)                                                                                  \
  do {                                                                                                                 \
    cudaError_t lattn_err_ = cudaGetLastError();                                                                       \
    if (lattn_err_ != cudaSuccess) ::lattn::cuda::throw_cuda_error(lattn_err_, "launch of " name, __FILE__, __LINE__); \
  } while (0)
