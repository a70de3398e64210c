// src/cuda/sm90/decode/fp8_instance.cuh — DecodeFp8KernelInstance's
// definition, explicitly instantiated once per dtype in instantiations/.
#pragma once

#include <cuda_runtime.h>

#include <mutex>

#include "cuda/common/cuda_check.h"
#include "cuda/sm90/decode/fp8_instance.h"
#include "cuda/sm90/decode/fp8_kernel.cuh"

namespace lattn::cuda::sm90 {

template <class T>
void DecodeFp8KernelInstance<T>::launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles,
                                        uint64_t kv_hint, cudaStream_t stream) {
  using K = DecodeFp8Traits<T>;
  constexpr auto kernel = mla_decode_sm90_fp8_kernel<K>;
  // The dynamic shared-memory limit, raised once per device (the first launch
  // is an eager one: the backend plans before any capture).
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  std::call_once(once[device % kMaxDevices], [&] {
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(K::kSmemBytes)));
  });
  const dim3 grid(unsigned(m_tiles), unsigned(p.plan.num_parts));
  kernel<<<grid, K::kThreads, K::kSmemBytes, stream>>>(p, cache_map, CacheHint(kv_hint));
  LATTN_CUDA_CHECK_LAUNCH("mla_decode_sm90_fp8_kernel");
}

}  // namespace lattn::cuda::sm90

#define LATTN_INSTANTIATE_DECODE_FP8_KERNEL_INSTANCE(T) template struct ::lattn::cuda::sm90::DecodeFp8KernelInstance<T>;
