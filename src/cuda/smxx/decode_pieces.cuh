// src/cuda/smxx/decode_pieces.cuh — the walk over the (request, key-tile
// range) pieces that the split-KV plan (decode_params.h, DecodePlan) gives to
// one part; shared by the decode kernels (sm80/decode, sm90/decode) so they
// cannot disagree with each other or with decode_combine about which part
// writes which slot.
#pragma once

#include "cuda/smxx/batch_invariant_split.h"
#include "cuda/smxx/decode_params.h"

namespace lattn::cuda {

// Calls fn(request, tile_begin, tile_end, slot) for every request whose cost
// range meets part `part`'s: tiles [tile_begin, tile_end) of `tile_keys` keys
// each (never empty), slot = the partial-result slot when the request is
// split, else -1 (the part writes the final output). Requests without keys
// are skipped (decode_combine writes their 0 / -inf).
template <class Fn>
__device__ __forceinline__ void for_each_decode_piece(const DecodeParams& p, int part, int tile_keys, Fn&& fn) {
  const DecodePlan& plan = p.plan;
  const int w = plan.header[0], total = plan.header[1];
  const int begin = part * w, end = min(begin + w, total);
  if (begin >= end) return;
  const int ovh = plan.overhead_tiles;
  for (int r = plan.part_first_req[part]; r < p.batch; ++r) {
    const int c0 = plan.cost_prefix[r];
    if (c0 >= end) break;
    const int c1 = plan.cost_prefix[r + 1];
    if (c1 == c0) continue;
    const int first_tile_pos = c0 + ovh;
    const int tiles = (p.seq_lens[r] + tile_keys - 1) / tile_keys;
    int tile_begin = max(begin, first_tile_pos) - first_tile_pos;
    int tile_end = min(min(end, c1) - first_tile_pos, tiles);
    // A batch-invariant plan's cost unit is one split: map the split's index to its tiles.
    if (plan.batch_invariant) batch_invariant_split_range(tiles, tile_begin, tile_begin, tile_end);
    if (tile_end <= tile_begin) continue;
    const int slot = plan.num_splits[r] >= 2 ? plan.split_offset[r] + (part - first_tile_pos / w) : -1;
    fn(r, tile_begin, tile_end, slot);
  }
}

}  // namespace lattn::cuda
