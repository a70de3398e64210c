// src/cuda/sm90/prefill/prefill_launch.h — the host entry point of the Hopper
// (sm_90a) prefill attention kernel (internal; plain C++, usable from tests
// and benchmarks).
#pragma once

#include <cstdint>

#include "cuda/sm80/prefill/prefill_params.h"
#include "cuda/sm90/prefill/prefill_config.h"
#include "lattn/stream.h"

namespace lattn::cuda::sm90 {

// True when this build contains the sm_90a kernels (LATTN_CUDA_ARCHS holds 90a).
bool hopper_prefill_compiled();

// Runs varlen prefill attention (the contract of sm80::PrefillParams) with
// the sm_90a kernel on `stream` (asynchronous). q_rows: rows of q and out;
// kv_rows: rows of k and v (the tensor maps' bounds). config: a row of
// kHopperPrefillConfigs whose dims match, or -1 for the default row of the
// params' dims. The current device must be compute capability 9.0. Throws ValueError for unsupported dims, pointers or
// strides the copy engine cannot address (16-byte alignment, strides
// multiples of 8 elements) and RuntimeError for a device that is not sm90 or
// a CUDA failure; nothing is launched then.
void run_hopper_prefill_attention(const sm80::PrefillParams& params, int64_t q_rows, int64_t kv_rows, Stream stream,
                                  int config = -1);

}  // namespace lattn::cuda::sm90
