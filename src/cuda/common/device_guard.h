// src/cuda/common/device_guard.h — makes a CUDA device current for a scope.
// The only device guard of lattn: every CUDA file that switches devices uses it.
#pragma once

#include <cuda_runtime.h>

#include <new>

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
  // For frees in destructors: never throws. When the runtime cannot report
  // the current device (the driver is shutting down at process exit) it
  // switches nothing and ok() is false: the caller skips its CUDA calls.
  DeviceGuard(int device, std::nothrow_t) noexcept : target_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      ok_ = false;
      target_ = previous_;
      return;
    }
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ != target_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  bool ok() const { return ok_; }

 private:
  int previous_ = 0;
  int target_ = 0;
  bool ok_ = true;
};

}  // namespace lattn::cuda
