// src/cuda/sm80/prefill/prefill_launch.h — the host entry point of the sm80 prefill
// attention kernels (internal; plain C++, usable from tests and benchmarks).
//
// Without CUDA (src/cuda/absent/prefill_launch_absent.cpp) run_prefill_attention
// throws; query functions still answer from the table.
#pragma once

#include "cuda/sm80/prefill/prefill_config.h"
#include "cuda/sm80/prefill/prefill_params.h"
#include "lattn/stream.h"

namespace lattn::cuda::sm80 {

// Runs varlen prefill attention on `stream` (asynchronous). config_index:
// a row of kPrefillTileConfigs whose dims match the params, or -1 for the
// default row of the params' dims. Throws ValueError for unsupported dims,
// misaligned pointers or strides, or an unknown / mismatched config (the
// message names what was given and what is supported), RuntimeError for a
// CUDA failure.
void run_prefill_attention(const PrefillParams& params, Stream stream, int config_index = -1);

}  // namespace lattn::cuda::sm80
