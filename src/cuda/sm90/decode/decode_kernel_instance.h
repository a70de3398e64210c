// src/cuda/sm90/decode/decode_kernel_instance.h — the Hopper decode kernel
// of one dtype, as the host code sees them (a launch function); defined in
// decode_kernel_instance.cuh, instantiated once per dtype in instantiations/.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/smxx/decode_params.h"

namespace lattn::cuda::sm90 {

template <class T>
struct DecodeKernelInstance {
  // kv_hint: the L2 cache-policy word of the KV copies (sm90::CacheHint).
  static void launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                     cudaStream_t stream);
};

}  // namespace lattn::cuda::sm90
