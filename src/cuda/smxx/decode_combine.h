// src/cuda/smxx/decode_combine.h — merges the split-KV partial results.
#pragma once

#include <cuda_runtime.h>

#include "cuda/smxx/decode_params.h"
#include "lattn/dtype.h"

namespace lattn::cuda {

// The most partial results one request may have (the combine's shared weights).
constexpr int kMaxDecodeSplitsPerRequest = 2048;

// For every request with num_splits >= 2: out/LSE = LSE-weighted sum of its
// partials (one warp per row, or for steps of at most 128 (request, row)
// pairs one CTA per row chunk: decode_combine_block.cuh; LATTN_DECODE_COMBINE=0|1
// forces either); for every request with no keys: out 0, LSE -inf. Requests with one
// split were written by the attention kernel. Visits only the requests the
// planner listed (decode_combine_reqs); its grid depends only on the plan's
// shape (batch, rows_capacity), so it is capturable. pdl: launched as a
// programmatic dependent of the attention kernel (common/grid_dependency.cuh;
// the combine waits for it before reading anything).
void launch_decode_combine(const DecodeParams& p, DType out_dtype, cudaStream_t stream, bool pdl = false);

}  // namespace lattn::cuda
