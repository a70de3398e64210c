// src/cuda/sm90/prefill/prefill_tile_scheduler.cuh — the persistent CTAs'
// walk over (request, head, query block) tiles, and the geometry of a tile.
//
// Work comes in units of two tiles of one (request, head): query blocks
// M - 1 - p and p (M blocks in the request). Under causal masking block m
// sees about m + 1 key blocks, so every unit of a request holds the same
// work (M + 1 blocks) — the long block first, then the short one — and a
// static round robin over units is balanced (a plain round robin over
// single tiles was not: with 16 x 1024 tokens some CTAs got a third more
// work than others). The grid is min(units, SMs); CTA c takes units c,
// c + grid, ... (the producer and the consumers walk the same list without
// talking to each other). Unit order: request, then head, then p, so the
// CTAs running at one time work on only a few heads and a head's K/V is
// read from HBM about once and then served by L2. Units and halves past a
// shorter request's blocks are skipped by every role alike.
#pragma once

#include "cuda/sm80/prefill/prefill_params.h"

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
  __host__ __device__ static int units_per_head(const PrefillParams& p) { return (max_m_blocks(p) + 1) / 2; }
  __host__ __device__ static long long num_units(const PrefillParams& p) {
    return static_cast<long long>(units_per_head(p)) * p.num_heads * p.batch;
  }

  // Fills `t` for half `half` (0: the long block, 1: the short one) of unit
  // `unit`; false when that tile does not exist (nothing to do for any role).
  __device__ static bool get_tile(const PrefillParams& p, int unit, int half, PrefillTile& t) {
    const int units = units_per_head(p);
    const int pair = unit % units;
    const int rest = unit / units;
    t.head = rest % p.num_heads;
    const int batch = rest / p.num_heads;
    t.q_start = __ldg(p.cu_seqlens_q + batch);
    t.seqlen_q = __ldg(p.cu_seqlens_q + batch + 1) - t.q_start;
    t.k_start = __ldg(p.cu_seqlens_k + batch);
    t.seqlen_k = __ldg(p.cu_seqlens_k + batch + 1) - t.k_start;
    const int m_blocks = (t.seqlen_q + kBlockM - 1) / kBlockM;
    t.m_block = half == 0 ? m_blocks - 1 - pair : pair;
    if (half == 0 ? pair >= (m_blocks + 1) / 2 : pair >= m_blocks - 1 - pair) return false;
    t.row0 = t.m_block * kBlockM;
    t.diag = t.seqlen_k - t.seqlen_q;
    int key_end = t.seqlen_k;  // the tile's last row inside the request sees keys below key_end
    if constexpr (kCausal) key_end = min(key_end, min(t.row0 + kBlockM, t.seqlen_q) + t.diag);
    t.n_blocks = key_end > 0 ? (key_end + kBlockN - 1) / kBlockN : 0;
    return true;
  }
};

}  // namespace lattn::cuda::sm90
