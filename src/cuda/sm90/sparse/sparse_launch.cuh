// src/cuda/sm90/sparse/sparse_launch.cuh — launch_sparse_mla_sm90's
// definition, instantiated once per cache format (sparse_instance_*.cu, so
// the two compile in parallel).
#pragma once

#include <cuda_runtime.h>

#include <mutex>

#include "cuda/common/cuda_check.h"
#include "cuda/sm90/sparse/sparse_kernel.cuh"

namespace lattn::cuda::sm90 {

template <bool kDsMla, int kFp8Batch>
void launch_sparse_mla_sm90(const SparseParams& p, cudaStream_t stream) {
  using K = SparseTraits<kDsMla, kFp8Batch>;
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];  // the shared-memory opt-in, once per device
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  std::call_once(once[device % kMaxDevices], [] {
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(sparse_mla_sm90_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(K::kSmemBytes)));
  });
  // (head tile, token % 65535, token / 65535): gridDim.y is at most 65535.
  const unsigned head_tiles = unsigned((p.N + K::kBlockM - 1) / K::kBlockM);
  const dim3 grid(head_tiles, unsigned(p.T < 65535 ? p.T : 65535), unsigned((p.T + 65534) / 65535));
  sparse_mla_sm90_kernel<K><<<grid, K::kThreads, K::kSmemBytes, stream>>>(p);
  LATTN_CUDA_CHECK_LAUNCH("sparse_mla_sm90_kernel");
}

}  // namespace lattn::cuda::sm90
