// src/cuda/sm90/decode/decode_kernel_instance.h — the Hopper decode kernels
// of one activation dtype, as the host code sees them (a launch function
// each): the 16-bit-cache kernel (defined in decode_kernel_instance.cuh) and
// the key-major fp8-cache kernel (fp8_instance.cuh) and the key-major
// 16-bit-cache kernel for at most 16 rows (km16_instance.cuh), instantiated
// once per dtype in instantiations/.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/smxx/decode_params.h"

namespace lattn::cuda::sm90 {

// All launch on grid (m_tiles, p.plan.num_parts); kv_hint is the L2
// cache-policy word of the KV copies (sm90::CacheHint).
template <class T>
struct DecodeKernelInstance {
  static void launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                     cudaStream_t stream);
};
// pdl: launched as a programmatic dependent of the kernel before it (the
// plan kernel); the kernel waits for it before reading global memory.
template <class T>
struct DecodeKm16KernelInstance {
  static void launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                     cudaStream_t stream, bool pdl);
};
template <class T>
struct DecodeFp8KernelInstance {
  static void launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                     cudaStream_t stream);
};

}  // namespace lattn::cuda::sm90
