// src/cuda/sm90/decode/decode_kernel_instance.cuh — DecodeKernelInstance's
// definition, explicitly instantiated once per dtype in instantiations/*.cu.
#pragma once

#include "cuda/common/cuda_check.h"
#include "cuda/sm90/decode/decode_kernel.cuh"
#include "cuda/sm90/decode/decode_kernel_instance.h"
#include "cuda/sm90/decode/decode_schedule.h"
#include "cuda/sm90/decode/seesaw_kernel.cuh"
#include "cuda/sm90/decode/smem_opt_in_launch.cuh"

namespace lattn::cuda::sm90 {

template <class T>
void DecodeKernelInstance<T>::launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                                     cudaStream_t stream) {
  using K = DecodeTraits<T>;
  // Batch-invariant plans whose parts fold several splits of a request
  // (decode_split_fold.cuh) take the folding kernel.
  if (p.plan.batch_invariant && p.plan.fold_splits) {
    detail::launch_decode_kernel<K, mla_decode_sm90_kernel<K, true>>(p, cache_map, m_tiles, kv_hint, stream);
    LATTN_CUDA_CHECK_LAUNCH("mla_decode_sm90_kernel (folding)");
    return;
  }
  if (decode_sm90_seesaw(false)) {
    using KS = SeesawTraits<T>;
    detail::launch_decode_kernel<KS, mla_decode_sm90_seesaw_kernel<KS>>(p, cache_map, m_tiles, kv_hint, stream);
    LATTN_CUDA_CHECK_LAUNCH("mla_decode_sm90_seesaw_kernel");
    return;
  }
  detail::launch_decode_kernel<K, mla_decode_sm90_kernel<K>>(p, cache_map, m_tiles, kv_hint, stream);
  LATTN_CUDA_CHECK_LAUNCH("mla_decode_sm90_kernel");
}

}  // namespace lattn::cuda::sm90

#define LATTN_INSTANTIATE_DECODE_KERNEL_INSTANCE(T) template struct ::lattn::cuda::sm90::DecodeKernelInstance<T>;
