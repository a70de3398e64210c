// src/cuda/smxx/decode_plan_math.cuh — the split-KV plan's per-request
// arithmetic (decode_params.h, DecodePlan), shared by the planning kernel
// (decode_scheduler.cu) and the one-launch small-batch kernel
// (decode_fused.cu, which plans in its own first warp), so the two cannot
// disagree about which part attends to which keys.
#pragma once

namespace lattn::cuda {

// Cost of a request in tile units: its KV tiles plus the fixed overhead, 0
// without keys; batch-invariant plans (split > 0) round up to whole splits.
__device__ __forceinline__ int decode_request_cost(int seq_len, int tile_keys, int overhead, int split) {
  const int tiles = (max(seq_len, 0) + tile_keys - 1) / tile_keys;
  if (split > 0) return (tiles + split - 1) / split * split;
  return tiles > 0 ? tiles + overhead : 0;
}

// Parts that attend to the request whose cost range is [c0, c1), with W = w
// cost units per part: a part boundary inside its tiles splits it.
__device__ __forceinline__ int decode_request_splits(int c0, int c1, int overhead, int w) {
  return c1 > c0 ? (c1 - 1) / w - (c0 + overhead) / w + 1 : 0;
}

// W: the cost units of one part.
__device__ __forceinline__ int decode_part_width(int total, int num_parts, int split) {
  return split > 0 ? split : max(1, (total + num_parts - 1) / num_parts);
}

}  // namespace lattn::cuda
