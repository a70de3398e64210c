// CUDA memory entries and the device query of the CUDA device-ops table (cuda/device_ops.h).
#include <cuda_runtime.h>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/device_ops.h"
#include "lattn/errors.h"

namespace lattn::cuda {

void* device_malloc(size_t bytes, int device) {
  DeviceGuard guard(device);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error so later calls see a clean state
    throw OutOfMemoryError("cudaMalloc of " + std::to_string(bytes) + " bytes on cuda:" + std::to_string(device) +
                           " failed: out of memory");
  }
  LATTN_CUDA_CHECK(err);
  return p;
}

void device_free(void* ptr, int device) noexcept {
  DeviceGuard guard(device, std::nothrow);
  if (guard.ok()) cudaFree(ptr);
}

void memcpy_any(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  const int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  DeviceGuard guard(device);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  LATTN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  if (stream == nullptr) LATTN_CUDA_CHECK(cudaStreamSynchronize(s));
}

void memset_device(void* ptr, int byte, size_t bytes, int device, Stream stream) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  LATTN_CUDA_CHECK(cudaMemsetAsync(ptr, byte, bytes, s));
  if (stream == nullptr) LATTN_CUDA_CHECK(cudaStreamSynchronize(s));
}

void memcpy_2d(void* dst, size_t dst_pitch, Device dst_device, const void* src, size_t src_pitch, Device src_device,
               size_t row_bytes, size_t rows, Stream stream) {
  if (row_bytes == 0 || rows == 0) return;
  const int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  DeviceGuard guard(device);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  LATTN_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDefault, s));
  if (stream == nullptr) LATTN_CUDA_CHECK(cudaStreamSynchronize(s));
}

void synchronize(Stream stream) { LATTN_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream))); }

CudaDeviceQuery query_devices() {
  CudaDeviceQuery q;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    q.unavailable_reason =
        std::string(err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice ? "no CUDA device"
                                                                                   : "CUDA unavailable") +
        " (" + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + ")";
    return q;
  }
  if (count == 0) {
    q.unavailable_reason = "no CUDA device (cudaGetDeviceCount returned 0)";
    return q;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    LATTN_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    CudaDeviceInfo info;
    info.index = i;
    info.name = prop.name;
    info.capability = {prop.major, prop.minor};
    info.sm_count = prop.multiProcessorCount;
    info.total_memory_bytes = prop.totalGlobalMem;
    info.l2_cache_bytes = uint64_t(prop.l2CacheSize);
    info.max_shared_memory_per_block_optin = int(prop.sharedMemPerBlockOptin);
    q.devices.push_back(std::move(info));
  }
  return q;
}

}  // namespace lattn::cuda
