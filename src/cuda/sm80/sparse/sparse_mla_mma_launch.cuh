// src/cuda/sm80/sparse/sparse_mla_mma_launch.cuh — the launch of one
// configuration of the tensor-core sparse kernel, explicitly instantiated by
// sparse_mla_mma_bf16.cu and sparse_mla_mma_fp8.cu (so they compile in
// parallel) and chosen by sparse_mla_mma.cu.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/cuda_check.h"
#include "cuda/sm80/sparse/sparse_mla_mma.cuh"

namespace lattn::cuda::sm80 {

template <class K>
void launch_sparse_mla_mma_config(const SparseParams& p, cudaStream_t stream) {
  LATTN_CUDA_CHECK(
      cudaFuncSetAttribute(sparse_mla_mma_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(K::kSmemBytes)));
  // (head tile, token % 65535, token / 65535): gridDim.y is at most 65535.
  const unsigned head_tiles = unsigned((p.N + K::kBlockM - 1) / K::kBlockM);
  const dim3 grid(head_tiles, unsigned(p.T < 65535 ? p.T : 65535), unsigned((p.T + 65534) / 65535));
  sparse_mla_mma_kernel<K><<<grid, K::kThreads, K::kSmemBytes, stream>>>(p);
  LATTN_CUDA_CHECK_LAUNCH("sparse_mla_mma_kernel");
}

}  // namespace lattn::cuda::sm80
