// src/cuda/common/context.h — per-device facts and library handles.
//
// A DeviceContext is created once per (thread, device) on first use: the
// device's properties (SM count, shared-memory limit) and a cuBLAS handle
// with its own fixed workspace, so cuBLAS never allocates while a CUDA graph
// is being captured. Handles are per thread because cuBLAS handles must not be
// used by two threads at once.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "lattn/stream.h"

namespace lattn::cuda {

struct DeviceContext {
  int device = 0;
  int sm_count = 0;
  int max_smem_per_block_optin = 0;  // bytes, usable after cudaFuncSetAttribute
  int max_smem_per_sm = 0;           // bytes
  int capability_major = 0, capability_minor = 0;
  // Peak DRAM bandwidth in GB/s from the memory clock and bus width (double
  // data rate); 0 where the driver reports neither. Kernel choices that
  // depend on how many bytes must be in flight read it (cuda_decode_backend).
  double dram_peak_gbps = 0;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublas_lt = nullptr;
  void* cublas_workspace = nullptr;  // device, kCublasWorkspaceBytes
  static constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;
};

// The calling thread's context for `device` (created on first use).
DeviceContext& device_context(int device);

// The calling thread's cuBLAS handle for `device`, bound to `stream`.
cublasHandle_t cublas_handle(int device, Stream stream);

// Translates a cuBLAS status into RuntimeError naming the operation.
void check_cublas(cublasStatus_t status, const char* what);

}  // namespace lattn::cuda
