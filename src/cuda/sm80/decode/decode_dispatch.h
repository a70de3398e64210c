// src/cuda/sm80/decode/decode_dispatch.h — tile configurations of the
// tensor-core decode kernel: which one a step gets, what it costs in shared
// memory and occupancy, and the launch (runtime -> compile-time dispatch in
// decode_dispatch.cu to one instantiation file per configuration).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/sm80/decode/decode_config.h"
#include "cuda/smxx/decode_params.h"
#include "lattn/dtype.h"

namespace lattn::cuda::sm80 {

// Shared memory a configuration needs (bytes), for 16-bit or fp8 caches.
size_t decode_smem_bytes(DecodeTileConfig config, bool fp8_cache);

// The largest configuration that fits the device's per-block shared memory
// (Hopper: 64 x 64 tiles; A100: 64 x 32; 99 KB parts: 16 x 32), with 16-row
// tiles when a request has at most 16 rows (H x s_q <= 16).
DecodeTileConfig choose_decode_tiles(int rows, int max_smem_per_block_optin, bool fp8_cache);

// Co-resident CTAs per SM for the configuration (also sets the kernel's
// shared-memory limit on the current device, once).
int decode_ctas_per_sm(DecodeTileConfig config, DType dtype, DType cache_dtype);

// Launches grid (m_tiles, p.plan.num_parts). dtype: f16/bf16; cache_dtype:
// dtype or fp8_e4m3.
void launch_decode_sm80(const DecodeParams& p, DecodeTileConfig config, DType dtype, DType cache_dtype, int m_tiles,
                        cudaStream_t stream);

}  // namespace lattn::cuda::sm80
