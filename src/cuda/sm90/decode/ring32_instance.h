// src/cuda/sm90/decode/ring32_instance.h — the ring32 schedule of the Hopper
// decode kernel and the copy probes, as the host code sees them (a launch
// function each; ring32_instance.cuh, instantiations/).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/smxx/decode_params.h"

namespace lattn::cuda::sm90 {

// The ring32 schedule (ring32_kernel.cuh) on grid (m_tiles, p.plan.num_parts);
// cache_map's boxes are 32 keys high; kv_hint as DecodeKernelInstance's.
template <class T>
struct DecodeRing32Instance {
  static void launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                     cudaStream_t stream);
};

// The copy probes (diagnostics, bf16 cache; wrong results), variant i of
// decode_host.cu's probe list; cache_map's boxes are that probe's keys high.
void launch_decode_sm90_copy_probe(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                                   int variant, cudaStream_t stream);

}  // namespace lattn::cuda::sm90
