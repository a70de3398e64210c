// src/cuda/sm90/decode/ring32_instance.cuh — DecodeRing32Instance's
// definition, explicitly instantiated once per dtype in instantiations/*.cu.
#pragma once

#include "cuda/common/cuda_check.h"
#include "cuda/sm90/decode/ring32_instance.h"
#include "cuda/sm90/decode/ring32_kernel.cuh"
#include "cuda/sm90/decode/smem_opt_in_launch.cuh"

namespace lattn::cuda::sm90 {

template <class T>
void DecodeRing32Instance<T>::launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                                     cudaStream_t stream) {
  using K = DecodeRing32Traits<T>;
  detail::launch_decode_kernel<K, mla_decode_sm90_ring32_kernel<K>>(p, cache_map, m_tiles, kv_hint, stream);
  LATTN_CUDA_CHECK_LAUNCH("mla_decode_sm90_ring32_kernel");
}

}  // namespace lattn::cuda::sm90

#define LATTN_INSTANTIATE_DECODE_RING32_INSTANCE(T) template struct ::lattn::cuda::sm90::DecodeRing32Instance<T>;
