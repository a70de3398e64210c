// The pointer-stable device workspace (see workspace.h).
#include "cuda/common/workspace.h"

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "lattn/errors.h"

namespace lattn::cuda {

Workspace::~Workspace() {
  if (data_) {
    DeviceGuard guard(device_, std::nothrow);
    if (guard.ok()) cudaFree(data_);
  }
}

void Workspace::reserve(size_t bytes, Stream stream, const char* what) {
  if (bytes <= capacity_) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LATTN_CUDA_CHECK(cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(stream), &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    throw RuntimeError(std::string(what) + ": the workspace must grow from " + std::to_string(capacity_) + " to " +
                       std::to_string(bytes) +
                       " bytes while a CUDA graph is being captured; run one step of the largest shape before "
                       "capturing (warm-up), so the capture only reuses memory");
  }
  DeviceGuard guard(device_);
  // Grow by at least 1.5x so a slowly growing batch does not reallocate every step.
  const size_t grown = bytes > capacity_ + capacity_ / 2 ? bytes : capacity_ + capacity_ / 2;
  void* fresh = nullptr;
  LATTN_CUDA_CHECK(cudaMalloc(&fresh, grown));
  if (data_) {
    // Earlier work on any stream may still use the old buffer.
    LATTN_CUDA_CHECK(cudaDeviceSynchronize());
    LATTN_CUDA_CHECK(cudaFree(data_));
  }
  data_ = fresh;
  capacity_ = grown;
}

}  // namespace lattn::cuda
