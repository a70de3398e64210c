// src/cuda/sm90/decode/smem_opt_in_launch.cuh — the launch both Hopper decode
// kernels share (decode_kernel_instance.cuh, fp8_instance.cuh).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <mutex>

#include "cuda/common/cuda_check.h"
#include "cuda/sm90/common/tma.cuh"  // CacheHint
#include "cuda/smxx/decode_params.h"

namespace lattn::cuda::sm90::detail {

// Raises the dynamic shared-memory limit of `kKernel` to K::kSmemBytes once
// per device (the first launch is an eager one: the backend plans before any
// capture), then launches it on grid (m_tiles, parts); the caller checks the
// launch. The kernel is a template argument so that each instantiation has
// its own once-flags. `pdl`: launched as a programmatic dependent of the
// kernel before it (common/grid_dependency.cuh; the kernel must wait for it).
template <class K, auto kKernel>
void launch_decode_kernel(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                          cudaStream_t stream, bool pdl = false) {
  constexpr auto kernel = kKernel;
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  std::call_once(once[device % kMaxDevices], [&] {
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(K::kSmemBytes)));
  });
  const dim3 grid(unsigned(m_tiles), unsigned(p.plan.num_parts));
  if (!pdl) {
    kernel<<<grid, K::kThreads, K::kSmemBytes, stream>>>(p, cache_map, CacheHint(kv_hint));
    return;
  }
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(K::kThreads);
  config.dynamicSmemBytes = K::kSmemBytes;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  LATTN_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p, cache_map, CacheHint(kv_hint)));
}

}  // namespace lattn::cuda::sm90::detail
