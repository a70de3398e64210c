// src/cuda/sm80/prefill/prefill_kernel.cuh — the varlen prefill attention kernel for
// sm80+: FlashAttention-2's algorithm with Q/K head dim and V head dim as
// separate template parameters (192/128 for DeepSeek, V never padded).
//
// One CTA computes block_m query rows of one (request, head); warps split
// the rows (16 or 32 each) and never exchange data. Key blocks are visited
// from the last to the first, so the blocks that need masking (the end of
// the keys, the causal diagonal) come first and the rest run unmasked.
//
// Pipeline (two cp.async groups in flight, FlashAttention-2's schedule):
//   Q + K[last] -> wait, sync -> issue V[n] -> S = Q K[n]ᵀ, softmax
//                -> wait, sync -> issue K[n-1] -> O += P V[n] -> next n
// so each tile's load overlaps the other half of the iteration's math, and
// two CTAs per SM (the 92 KB 192/128 tile) overlap one's softmax with the
// other's MMAs.
#pragma once

#include <cuda_runtime.h>

#include "cuda/sm80/prefill/prefill_epilogue.cuh"
#include "cuda/sm80/prefill/prefill_mainloop.cuh"
#include "cuda/sm80/prefill/prefill_params.h"
#include "cuda/sm80/prefill/prefill_tile_scheduler.cuh"
#include "cuda/sm80/prefill/prefill_traits.cuh"

namespace lattn::cuda::sm80 {

template <class Traits, bool kCausal>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    prefill_attention_kernel(const __grid_constant__ PrefillParams params) {
  using Element = typename Traits::Element;
  using Mainloop = PrefillMainloop<Traits, kCausal>;
  using Epilogue = PrefillEpilogue<Traits>;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kWarpRows = Traits::kWarpRows;

  extern __shared__ __align__(128) uint8_t smem[];

  PrefillTile tile;
  if (!PrefillTileScheduler<kBlockM>::get_tile(params, tile)) return;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int row0 = tile.m_block * kBlockM;  // first query row of the tile (request-relative)
  const int tile_rows = min(kBlockM, tile.seqlen_q - row0);
  const int diag = tile.seqlen_k - tile.seqlen_q;  // query i sees keys j <= i + diag (causal)

  const Element* q =
      static_cast<const Element*>(params.q) + tile.q_start * params.q_row_stride + tile.head * params.q_head_stride;
  const Element* k =
      static_cast<const Element*>(params.k) + tile.k_start * params.k_row_stride + tile.head * params.k_head_stride;
  const Element* v =
      static_cast<const Element*>(params.v) + tile.k_start * params.v_row_stride + tile.head * params.v_head_stride;

  // Keys [0, key_end) can be seen by some row of the tile.
  int key_end = tile.seqlen_k;
  if constexpr (kCausal) key_end = min(key_end, row0 + kBlockM + diag);
  // Output pointers at the tile's first row (computed where used, so they
  // hold no registers through the main loop).
  auto out_at = [&](int row) {
    return static_cast<Element*>(params.out) + static_cast<int64_t>(tile.q_start + row) * params.out_row_stride +
           static_cast<int64_t>(tile.head) * params.out_head_stride;
  };
  auto lse_at = [&](int row) -> float* {
    return params.lse == nullptr
               ? nullptr
               : params.lse + static_cast<int64_t>(tile.head) * params.lse_head_stride + tile.q_start + row;
  };
  if (key_end <= 0) {
    Epilogue::store_empty(out_at(row0), params.out_row_stride, lse_at(row0), tile_rows, tid);
    return;
  }
  const int n_blocks = (key_end + kBlockN - 1) / kBlockN;

  const uint32_t smem_base = smem_addr(smem);
  const auto lanes = Mainloop::lane_offsets(smem_base, warp, lane);

  Mainloop::template load_tile<kBlockM, Traits::kChunksQK, Traits::kPitchQK>(
      smem_base + Traits::kSmemQ, q, params.q_row_stride, row0, tile.seqlen_q, tid);
  Mainloop::template load_tile<kBlockN, Traits::kChunksQK, Traits::kPitchQK>(
      smem_base + Traits::kSmemK, k, params.k_row_stride, (n_blocks - 1) * kBlockN, tile.seqlen_k, tid);
  cp_async_commit();

  float acc_o[Traits::kMTiles][Traits::kNTilesO][4];
  float row_offset[Traits::kMTiles][2];  // see PrefillMainloop::online_softmax
  float row_sum[Traits::kMTiles][2];     // this thread's partial row sums
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt) {
#pragma unroll
    for (int j = 0; j < Traits::kNTilesO; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][j][e] = 0.f;
    row_offset[mt][0] = row_offset[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  const float scale_log2 = params.scale * 1.4426950408889634f;  // log2(e)
  const int warp_row0 = row0 + warp * kWarpRows;                // the warp's first query row
  // The warp's rows see keys below warp_key_end; a warp whose rows are all
  // padding, or which sees none of a block's keys, skips that block's math
  // (it still joins the loads and barriers).
  int warp_key_end = tile.seqlen_k;
  if constexpr (kCausal) warp_key_end = min(warp_key_end, warp_row0 + kWarpRows + diag);
  if (warp_row0 >= tile.seqlen_q) warp_key_end = 0;
  // Element [0][*][0] of acc_s is row g of m16 tile 0, key 2t of n8 tile 0.
  const int thread_key_limit = warp_row0 + lane / 4 + diag + 1;
  const int thread_col = 2 * (lane % 4);

  for (int nb = n_blocks - 1; nb >= 0; --nb) {
    const int key0 = nb * kBlockN;
    cp_async_wait<0>();  // K[nb] (and Q) landed
    __syncthreads();     // ... for every thread; and every warp is done with V[nb + 1]
    Mainloop::template load_tile<kBlockN, Traits::kChunksV, Traits::kPitchV>(
        smem_base + Traits::kSmemV, v, params.v_row_stride, key0, tile.seqlen_k, tid);
    cp_async_commit();

    const bool warp_active = key0 < warp_key_end;
    uint32_t p_frag[Traits::kMTiles][Traits::kKStepsPV][4];
    if (warp_active) {
      float acc_s[Traits::kMTiles][Traits::kNTilesS][4];
      Mainloop::compute_qk(acc_s, lanes.q, lanes.k);
      // Only blocks that reach past the keys' end or above the smallest
      // row's diagonal need a mask.
      bool need_mask = key0 + kBlockN > tile.seqlen_k;
      if constexpr (kCausal) need_mask = need_mask || key0 + kBlockN - 1 > warp_row0 + diag;
      if (need_mask) Mainloop::mask_scores(acc_s, thread_key_limit, key0 + thread_col, tile.seqlen_k);
      Mainloop::online_softmax(acc_s, acc_o, row_offset, row_sum, p_frag, scale_log2);
    }

    cp_async_wait<0>();  // V[nb] landed
    __syncthreads();     // ... for every thread; and every warp is done with K[nb]
    if constexpr (kCausal) {
      // Keys of this block that some row of the tile does not see (the
      // diagonal): a masked key must contribute nothing, but P = 0 times a NaN
      // or inf value is NaN in the tensor-core product. Their non-finite values
      // are zeroed; a row that does see such a key is NaN through its score
      // (K and V come from the same latent). docs/mla.md, "NaN and inf".
      const int k_lo = max(key0, row0 + diag + 1), k_hi = min(key0 + kBlockN, tile.seqlen_k);
      if (k_lo < k_hi) {
        Mainloop::sanitize_values(smem + Traits::kSmemV, k_lo - key0, k_hi - key0, tid);
        __syncthreads();
      }
    }
    if (nb > 0) {
      Mainloop::template load_tile<kBlockN, Traits::kChunksQK, Traits::kPitchQK>(
          smem_base + Traits::kSmemK, k, params.k_row_stride, key0 - kBlockN, tile.seqlen_k, tid);
      cp_async_commit();
    }
    if (warp_active) Mainloop::compute_pv(p_frag, acc_o, lanes.v);
  }

  Epilogue::store(acc_o, row_offset, row_sum, smem + Traits::kSmemQ + warp * kWarpRows * Traits::kPitchV,
                  out_at(row0 + warp * kWarpRows), params.out_row_stride, lse_at(row0 + warp * kWarpRows),
                  tile_rows - warp * kWarpRows, lane);
}

}  // namespace lattn::cuda::sm80
