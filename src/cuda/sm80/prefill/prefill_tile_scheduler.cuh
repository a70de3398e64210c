// src/cuda/sm80/prefill/prefill_tile_scheduler.cuh — which (request, head, query
// block) each CTA computes.
//
// One CTA per tile, on a 1-D grid of max_m_blocks * num_heads * batch. The
// query block varies fastest, so the CTAs resident at one time work on few
// heads and the K/V of a head is read from HBM about once and then served by
// L2 to the other query blocks of that head. Within a (request, head) the
// order is longest-first: slot 0 is the request's last query block, which
// for causal attention has the most keys, so the short blocks fill the tail
// of the launch instead of the long ones (FlashAttention-3's ordering).
// Slots past a shorter request's block count exit at once.
#pragma once

#include "cuda/sm80/prefill/prefill_params.h"

namespace lattn::cuda::sm80 {

struct PrefillTile {
  int batch, head, m_block;
  int q_start, seqlen_q;  // the request's query rows [q_start, q_start + seqlen_q)
  int k_start, seqlen_k;  // its key rows [k_start, k_start + seqlen_k)
};

template <int kBlockM>
struct PrefillTileScheduler {
  static int max_m_blocks(const PrefillParams& p) { return (p.max_seqlen_q + kBlockM - 1) / kBlockM; }
  static long long num_ctas(const PrefillParams& p) {
    return static_cast<long long>(max_m_blocks(p)) * p.num_heads * p.batch;
  }

  // False when this CTA has no tile (its slot is past its request's end).
  __device__ static bool get_tile(const PrefillParams& p, PrefillTile& t) {
    const int slots = (p.max_seqlen_q + kBlockM - 1) / kBlockM;
    const int slot = static_cast<int>(blockIdx.x % static_cast<unsigned>(slots));
    const int rest = static_cast<int>(blockIdx.x / static_cast<unsigned>(slots));
    t.head = rest % p.num_heads;
    t.batch = rest / p.num_heads;
    t.q_start = p.cu_seqlens_q[t.batch];
    t.seqlen_q = p.cu_seqlens_q[t.batch + 1] - t.q_start;
    t.k_start = p.cu_seqlens_k[t.batch];
    t.seqlen_k = p.cu_seqlens_k[t.batch + 1] - t.k_start;
    const int m_blocks = (t.seqlen_q + kBlockM - 1) / kBlockM;
    t.m_block = m_blocks - 1 - slot;
    return t.m_block >= 0;
  }
};

}  // namespace lattn::cuda::sm80
