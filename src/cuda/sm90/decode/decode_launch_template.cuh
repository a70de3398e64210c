// src/cuda/sm90/decode/decode_launch_template.cuh — DecodeSm90Launcher's
// definition, explicitly instantiated once per dtype in instantiations/*.cu.
#pragma once

#include <cuda_runtime.h>

#include <mutex>

#include "cuda/common/cuda_check.h"
#include "cuda/sm90/decode/decode_kernel.cuh"
#include "cuda/sm90/decode/decode_launcher.h"

namespace lattn::cuda::sm90 {

template <class T>
void DecodeSm90Launcher<T>::launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles,
                                   uint64_t kv_hint, cudaStream_t stream) {
  using K = DecodeTraits<T>;
  // Raise the dynamic shared-memory limit once per device (the first launch
  // is an eager one: the backend plans before any capture).
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  std::call_once(once[device % kMaxDevices], [] {
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(mla_decode_sm90_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(K::kSmemBytes)));
  });
  const dim3 grid(unsigned(m_tiles), unsigned(p.plan.num_parts));
  mla_decode_sm90_kernel<K><<<grid, K::kThreads, K::kSmemBytes, stream>>>(p, cache_map, CacheHint(kv_hint));
  LATTN_CUDA_CHECK_LAUNCH("mla_decode_sm90_kernel");
}

}  // namespace lattn::cuda::sm90

#define LATTN_INSTANTIATE_DECODE_SM90(T) template struct ::lattn::cuda::sm90::DecodeSm90Launcher<T>;
