// src/cuda/sm80/decode/decode_kernel_launcher_impl.cuh — the definition of
// DecodeKernelLauncher, explicitly instantiated once per configuration in
// instantiations/*.cu (so the heavy kernels compile in parallel,
// FlashAttention-3 style).
#pragma once

#include <cuda_runtime.h>

#include <mutex>

#include "cuda/common/cuda_check.h"
#include "cuda/sm80/decode/decode_kernel.cuh"
#include "cuda/sm80/decode/decode_kernel_launcher.h"

namespace lattn::cuda::sm80 {

// Raises the kernel's dynamic shared-memory limit on the current device, once
// per device (before the first launch, which is never inside a graph capture:
// prepare_metadata queries the occupancy first).
template <class K, bool kFold = false>
void set_decode_kernel_attributes() {
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  std::call_once(once[device % kMaxDevices], [] {
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(mla_decode_kernel<K, kFold>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(K::kSmemBytes)));
  });
}

template <class K>
int DecodeKernelLauncher<K>::ctas_per_sm() {
  set_decode_kernel_attributes<K>();
  int blocks = 0;
  LATTN_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, mla_decode_kernel<K>, K::kThreads, K::kSmemBytes));
  return blocks;
}

template <class K>
void DecodeKernelLauncher<K>::launch(const DecodeParams& p, int m_tiles, cudaStream_t stream) {
  const dim3 grid(unsigned(m_tiles), unsigned(p.plan.num_parts));
  // Batch-invariant plans with folding (16-row tiles only: the planner sets
  // fold_splits for no other sm80 tiles; hopper's wgmma kernel folds in sm90/decode).
  if constexpr (K::kMTiles == 1) {
    if (p.plan.batch_invariant && p.plan.fold_splits) {
      set_decode_kernel_attributes<K, true>();
      mla_decode_kernel<K, true><<<grid, K::kThreads, K::kSmemBytes, stream>>>(p);
      LATTN_CUDA_CHECK_LAUNCH("mla_decode_kernel (folding)");
      return;
    }
  }
  set_decode_kernel_attributes<K>();
  mla_decode_kernel<K><<<grid, K::kThreads, K::kSmemBytes, stream>>>(p);
  LATTN_CUDA_CHECK_LAUNCH("mla_decode_kernel");
}

}  // namespace lattn::cuda::sm80

// One configuration: block_m, block_n, warps, activation type, cache type.
#define LATTN_INSTANTIATE_DECODE(M, N, W, S, T, C) \
  template struct ::lattn::cuda::sm80::DecodeKernelLauncher<::lattn::cuda::sm80::DecodeTraits<M, N, W, S, T, C>>;
