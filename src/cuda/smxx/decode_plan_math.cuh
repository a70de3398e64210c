// src/cuda/smxx/decode_plan_math.cuh — the split-KV plan's per-request
// arithmetic (decode_params.h, DecodePlan), shared by the planning kernel
// (decode_scheduler.cu) and the one-launch small-batch kernel
// (decode_fused.cu, which plans in its own first warp), so the two cannot
// disagree about which part attends to which keys.
#pragma once

#include "cuda/smxx/batch_invariant_split.h"

namespace lattn::cuda {

// Cost of a request in tile units: its KV tiles plus the fixed overhead, 0
// without keys; in batch-invariant plans the unit is one split and the cost
// the request's number of splits (batch_invariant_split.h; overhead 0).
__device__ __forceinline__ int decode_request_cost(int seq_len, int tile_keys, int overhead, bool invariant,
                                                   int split_rule) {
  const int tiles = (max(seq_len, 0) + tile_keys - 1) / tile_keys;
  if (invariant) return batch_invariant_num_splits(tiles, split_rule);
  return tiles > 0 ? tiles + overhead : 0;
}

// Parts that attend to the request whose cost range is [c0, c1), with W = w
// cost units per part: a part boundary inside its tiles splits it.
__device__ __forceinline__ int decode_request_splits(int c0, int c1, int overhead, int w) {
  return c1 > c0 ? (c1 - 1) / w - (c0 + overhead) / w + 1 : 0;
}

// W: the cost units of one part (splits in batch-invariant plans: 1 unless
// the kernel folds splits, whose plans have one wave of parts).
__device__ __forceinline__ int decode_part_width(int total, int num_parts) {
  return max(1, (total + num_parts - 1) / num_parts);
}

// The plan's num_splits of a request met by `parts` parts whose cost range is
// [c0, c1): the parts in balanced plans; in batch-invariant plans, when
// several parts meet it, its number of splits (one partial slot per split,
// decode_params.h), else 1 (or 0 without keys).
__device__ __forceinline__ int decode_request_slots(int parts, int c0, int c1, bool invariant) {
  return invariant && parts >= 2 ? c1 - c0 : parts;
}

}  // namespace lattn::cuda
