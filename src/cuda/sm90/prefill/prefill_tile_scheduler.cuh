// src/cuda/sm90/prefill/prefill_tile_scheduler.cuh — the persistent CTAs'
// walk over (request, head, query block) tiles, and the geometry of a tile.
//
// The grid is min(tiles, SMs); CTA c takes tiles c, c + grid, c + 2 grid, ...
// (static round robin: the producer and the consumers walk the same list
// without talking to each other). Tile index order: request, then head, then
// query block from the request's LAST block to its first. The last block of a
// causal request sees the most keys, so each (request, head) starts with its
// longest tiles and its short ones fill the end of the walk; and the CTAs
// running at one time work on only a few heads, so a head's K/V is read from
// HBM about once and then served to its other query blocks by L2. Slots past a
// shorter request's block count are skipped by every role alike.
#pragma once

#include "cuda/sm80/prefill_params.h"

namespace lattn::cuda::sm90 {

using sm80::PrefillParams;

struct PrefillTile {
  int head, m_block;
  int q_start, seqlen_q;  // the request's query rows [q_start, q_start + seqlen_q)
  int k_start, seqlen_k;  // its key rows [k_start, k_start + seqlen_k)
  int row0;               // first query row of the tile, request-relative
  int diag;               // causal: query i sees keys j <= i + diag (bottom-right aligned)
  int n_blocks;           // key blocks [0, n_blocks) hold a key some row of the tile sees
};

template <int kBlockM, int kBlockN, bool kCausal>
struct PrefillTileScheduler {
  __host__ __device__ static int max_m_blocks(const PrefillParams& p) { return (p.max_seqlen_q + kBlockM - 1) / kBlockM; }
  static long long num_tiles(const PrefillParams& p) {
    return static_cast<long long>(max_m_blocks(p)) * p.num_heads * p.batch;
  }

  // Fills `t` for tile `index`; false when the slot is past its request's
  // query blocks (nothing to do for any role).
  __device__ static bool get_tile(const PrefillParams& p, int index, PrefillTile& t) {
    const int slots = max_m_blocks(p);
    const int slot = index % slots;
    const int rest = index / slots;
    t.head = rest % p.num_heads;
    const int batch = rest / p.num_heads;
    t.q_start = __ldg(p.cu_seqlens_q + batch);
    t.seqlen_q = __ldg(p.cu_seqlens_q + batch + 1) - t.q_start;
    t.k_start = __ldg(p.cu_seqlens_k + batch);
    t.seqlen_k = __ldg(p.cu_seqlens_k + batch + 1) - t.k_start;
    t.m_block = (t.seqlen_q + kBlockM - 1) / kBlockM - 1 - slot;
    if (t.m_block < 0) return false;
    t.row0 = t.m_block * kBlockM;
    t.diag = t.seqlen_k - t.seqlen_q;
    int key_end = t.seqlen_k;  // the tile's last row inside the request sees keys below key_end
    if constexpr (kCausal) key_end = min(key_end, min(t.row0 + kBlockM, t.seqlen_q) + t.diag);
    t.n_blocks = key_end > 0 ? (key_end + kBlockN - 1) / kBlockN : 0;
    return true;
  }
};

}  // namespace lattn::cuda::sm90
