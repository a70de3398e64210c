// src/cuda/common/device_guard.h — makes a CUDA device current for a scope.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/cuda_check.h"

namespace lattn::cuda {

// Sets `device` current and restores the previous device on destruction
// (ops may be called from threads whose current device is another GPU).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : target_(device) {
    LATTN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) LATTN_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    if (previous_ != target_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int target_ = 0;
};

}  // namespace lattn::cuda
