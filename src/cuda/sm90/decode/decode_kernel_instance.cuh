// src/cuda/sm90/decode/decode_kernel_instance.cuh — DecodeKernelInstance's
// definition, explicitly instantiated once per dtype in instantiations/*.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
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
// once-flags. With `multicast` and an even m_tiles, the grid runs as 2-CTA
// clusters along the M tiles (the kernel shares each KV tile's copies
// between the two), if the device can hold all of them at once (else a
// second wave would cost more than the copies save) — else without.
template <class K, auto kKernel>
void launch_decode_kernel(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                          bool multicast, cudaStream_t stream) {
  constexpr auto kernel = kKernel;
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  static int max_clusters[kMaxDevices];
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  const dim3 grid(unsigned(m_tiles), unsigned(p.plan.num_parts));
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 2;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(K::kThreads);
  cfg.dynamicSmemBytes = K::kSmemBytes;
  cfg.stream = stream;
  std::call_once(once[device % kMaxDevices], [&] {
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(K::kSmemBytes)));
    cudaLaunchConfig_t q = cfg;
    q.gridDim = dim3(2, 1, 1);
    q.attrs = &cluster;
    q.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &q) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    max_clusters[device % kMaxDevices] = n;
    if (std::getenv("LATTN_HOPPER_VERBOSE")) std::fprintf(stderr, "hopper decode: %d 2-CTA clusters fit\n", n);
  });
  const bool mc = multicast && m_tiles % 2 == 0 &&
                  int64_t(m_tiles / 2) * p.plan.num_parts <= int64_t(max_clusters[device % kMaxDevices]);
  if (mc) {
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
  }
  LATTN_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p, cache_map, CacheHint(kv_hint), int(mc)));
}
}  // namespace detail

template <class T>
void DecodeKernelInstance<T>::launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles,
                                     uint64_t kv_hint, bool multicast, cudaStream_t stream) {
  using K = DecodeTraits<T>;
  detail::launch_decode_kernel<K, mla_decode_sm90_kernel<K>>(p, cache_map, m_tiles, kv_hint, multicast, stream);
  LATTN_CUDA_CHECK_LAUNCH("mla_decode_sm90_kernel");
}

}  // namespace lattn::cuda::sm90

#define LATTN_INSTANTIATE_DECODE_KERNEL_INSTANCE(T) template struct ::lattn::cuda::sm90::DecodeKernelInstance<T>;
