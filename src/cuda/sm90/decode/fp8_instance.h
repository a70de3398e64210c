// src/cuda/sm90/decode/fp8_instance.h — the key-major fp8-cache Hopper decode
// kernel of one activation dtype, as the host code sees it (a launch
// function); defined in fp8_instance.cuh, instantiated once per dtype in
// instantiations/decode_sm90_fp8_*.cu.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/smxx/decode_params.h"

namespace lattn::cuda::sm90 {

template <class T>
struct DecodeFp8KernelInstance {
  // Grid (m_tiles, p.plan.num_parts); kv_hint: the L2 policy word of the copies (CacheHint).
  static void launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                     cudaStream_t stream);
};

}  // namespace lattn::cuda::sm90
