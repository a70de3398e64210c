// src/cuda/sm90/decode/decode_launcher.h — the per-dtype launcher, defined in
// decode_launch_template.cuh and instantiated in instantiations/.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/sm90/decode/decode_launch.h"  // DecodeSm90Schedule
#include "cuda/smxx/decode_params.h"

namespace lattn::cuda::sm90 {

template <class T>
struct DecodeSm90Launcher {
  // kv_hint: the L2 cache-policy word of the KV copies (sm90::CacheHint).
  static void launch(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                     DecodeSm90Schedule schedule, cudaStream_t stream);
};

}  // namespace lattn::cuda::sm90
