// src/cuda/sm90/decode/decode_kernel_instance.cuh — DecodeKernelInstance's
// definition, explicitly instantiated once per dtype in instantiations/*.cu.
#pragma once

#include <cuda_runtime.h>

#include <mutex>

#include "cuda/common/cuda_check.h"
#include "cuda/sm90/decode/decode_kernel.cuh"
#include "cuda/sm90/decode/decode_kernel_instance.h"

namespace lattn::cuda::sm90 {

namespace detail {
// Raises the dynamic shared-memory limit of `kernel` once per device (the
// first launch is an eager one: the backend plans before any capture), then
// launches it on grid (m_tiles, parts); the caller checks the launch. The
// kernel is a template argument so that each instantiation has its own
// once-flags.
template <class K, auto kKernel>
void launch_decode_kernel(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                          cudaStream_t stream) {
  constexpr auto kernel = kKernel;
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  std::call_once(once[device % kMaxDevices], [&] {
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(K::kSmemBytes)));
  });
  const dim3 grid(unsigned(m_tiles), unsigned(p.plan.num_parts));
  kernel<<<grid, K::kThreads, K::kSmemBytes, stream>>>(p, cache_map, CacheHint(kv_hint));
}
}  // namespace detail

template <class T>
void DecodeKernelInstance<T>::launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                                     cudaStream_t stream) {
  using K = DecodeTraits<T>;
  detail::launch_decode_kernel<K, mla_decode_sm90_kernel<K>>(p, cache_map, m_tiles, kv_hint, stream);
  LATTN_CUDA_CHECK_LAUNCH("mla_decode_sm90_kernel");
}

}  // namespace lattn::cuda::sm90

#define LATTN_INSTANTIATE_DECODE_KERNEL_INSTANCE(T) template struct ::lattn::cuda::sm90::DecodeKernelInstance<T>;
