// src/cuda/smxx/decode_fused.h — the one-launch decode of small batches:
// plan, split-KV attention and combine in one cooperative kernel.
//
// A batch of a few long requests is split over every SM (one part per SM),
// so its step is three short kernels (plan, attention, combine) whose launch
// gaps and serial latencies are most of the time (docs/perf.md, "CUDA decode:
// one plan per step and small batches"). This kernel runs the same
// attention (the sm80 kernel's `attend_piece`, 16-row tiles) on the same
// plan, but:
//   - each CTA's first warp computes the plan from seq_lens itself (batches
//     of at most kFusedDecodeMaxBatch requests: one lane per request), with
//     the planning kernel's arithmetic (decode_plan_math.cuh): no planning
//     kernel, no plan arrays in memory;
//   - after the attention, a grid barrier (the launch is cooperative, so all
//     CTAs are resident), then every CTA merges a share of the split
//     requests' partials (still in L2) and writes the output and LSE, with
//     the combine kernel's arithmetic (decode_combine.cu).
// The plan workspace only provides the partial slots.
#pragma once

#include <cuda_runtime.h>

#include "cuda/sm80/decode/decode_config.h"
#include "cuda/smxx/decode_params.h"
#include "lattn/dtype.h"

namespace lattn::cuda {

// The largest batch the kernel plans in one warp.
constexpr int kFusedDecodeMaxBatch = 32;

// Whether a kernel is compiled for the tile configuration and dtype pair
// (the Hopper 16-row configuration m16n64w8s3 with a cache of the activation
// dtype), and the device is sm90 (its body is compiled for sm_90a only).
bool decode_fused_supported(sm80::DecodeTileConfig config, DType dtype, DType cache_dtype, int cc_major);

// Co-resident CTAs per SM (sets the kernel's shared-memory limit, once per device).
int decode_fused_ctas_per_sm(sm80::DecodeTileConfig config, DType dtype);

// Launches grid (m_tiles, p.plan.num_parts) cooperatively. p.plan needs
// num_parts, rows_capacity, tile_keys, overhead_tiles and the partial slots;
// its other arrays are not read. grid_sync: 2 words of device memory, zero
// before the first launch, used by no other kernel (they are zero again
// after every launch).
// stages: which phases run (kFusedStageAll; the others are measurement-only
// stage removals for docs/perf.md: without attention or combine the outputs
// are wrong; without the metadata prefetch they are right).
constexpr int kFusedStageAttention = 1, kFusedStageCombine = 2, kFusedStagePrefetch = 4, kFusedStageAll = 7;
void launch_decode_fused(const DecodeParams& p, uint32_t* grid_sync, sm80::DecodeTileConfig config, DType dtype,
                         int m_tiles, cudaStream_t stream, int stages = kFusedStageAll);

}  // namespace lattn::cuda
