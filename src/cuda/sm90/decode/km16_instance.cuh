// src/cuda/sm90/decode/km16_instance.cuh — DecodeKm16KernelInstance's
// definition (declared in decode_kernel_instance.h), explicitly instantiated
// once per dtype in instantiations/decode_sm90_km16_*.cu.
#pragma once

#include "cuda/common/cuda_check.h"
#include "cuda/sm90/decode/decode_kernel_instance.h"
#include "cuda/sm90/decode/km16_kernel.cuh"
#include "cuda/sm90/decode/smem_opt_in_launch.cuh"

namespace lattn::cuda::sm90 {

template <class T>
void DecodeKm16KernelInstance<T>::launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles,
                                         uint64_t kv_hint, cudaStream_t stream, bool pdl) {
  using K = DecodeKm16Traits<T>;
  detail::launch_decode_kernel<K, mla_decode_sm90_km16_kernel<K>>(p, cache_map, m_tiles, kv_hint, stream, pdl);
  LATTN_CUDA_CHECK_LAUNCH("mla_decode_sm90_km16_kernel");
}

}  // namespace lattn::cuda::sm90

#define LATTN_INSTANTIATE_DECODE_KM16_KERNEL_INSTANCE(T) \
  template struct ::lattn::cuda::sm90::DecodeKm16KernelInstance<T>;
