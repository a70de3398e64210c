// src/cuda/smxx/decode_scheduler.h — the split-KV plan of a decode step.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/smxx/decode_params.h"

namespace lattn::cuda {

// Bytes of workspace a plan needs for `batch` requests (see carve_decode_plan).
// min_slots: partial slots needed beyond 2 * num_parts (batch-invariant plans
// with W > 1: at most the batch's splits); fold_splits: with the folding
// kernel's scratch (carve_decode_plan reads plan.fold_splits for it).
size_t decode_plan_bytes(int batch, int num_parts, int rows_capacity, int L, int min_slots = 0,
                         bool fold_splits = false);

// Points plan's arrays into `workspace` (same layout every step for the same
// sizes: pointer-stable). Sets num_parts, slot_capacity, rows_capacity.
// Returns the bytes used (workspace may be nullptr to only measure).
size_t carve_decode_plan(void* workspace, int batch, int num_parts, int rows_capacity, int L, DecodePlan& plan,
                         int min_slots = 0);

// The requests the combine must visit (no keys: it writes 0 / -inf; or split
// in two or more parts), plan.header[2] of them in increasing order. They
// follow the header in the plan's workspace ([batch] ints).
__host__ __device__ inline int32_t* decode_combine_reqs(const DecodePlan& plan) { return plan.header + 3; }

// Launches the planning kernel: reads seq_lens [batch] (device) and writes the
// plan. whole_requests: allow a whole-request plan (decode_scheduler.cu) when
// whole requests fill the parts evenly. Capturable in a CUDA graph (one small
// kernel, fixed shape).
void launch_decode_plan(const int32_t* seq_lens, int batch, const DecodePlan& plan, bool whole_requests,
                        cudaStream_t stream);

}  // namespace lattn::cuda
