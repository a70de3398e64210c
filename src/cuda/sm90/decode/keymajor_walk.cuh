// src/cuda/sm90/decode/keymajor_walk.cuh — the warp roles both key-major
// Hopper decode kernels (fp8_kernel.cuh, km16_kernel.cuh) share: the producer
// warpgroup's thread filling the ring of K::kStages tiles, and the consumer
// warpgroups' walk over the CTA's pieces, consumer warpgroup g taking the
// walk's tiles it with it % 2 == g. What a tile costs (the products, the
// softmax, what the cache format needs masked or cleaned) and how a piece's
// result is written are each kernel's own, passed in as lambdas.
#pragma once

#include <cmath>

#include "cuda/sm90/common/cta_smem.cuh"
#include "cuda/sm90/common/tma.cuh"
#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/decode/decode_producer.cuh"
#include "cuda/sm90/decode/fp8_mainloop.cuh"  // Fp8SoftmaxState, kFp8BarAll
#include "cuda/sm90/decode/keymajor_merge.cuh"
#include "cuda/smxx/decode_params.h"
#include "cuda/smxx/decode_pieces.cuh"

namespace lattn::cuda::sm90 {

// The producer warpgroup (threads from K::kConsumerThreads): gives its
// registers to the consumers; its first thread copies every tile of the
// part's pieces into stage it % kStages (decode_producer.cuh).
template <class K>
__device__ __forceinline__ void keymajor_produce(const DecodeParams& p, int part, const CUtensorMap* cache_map,
                                                 const CtaSmem<K>& smem, CacheHint kv_hint) {
  setmaxnreg_dec<K::kProducerRegs>();
  if (threadIdx.x != K::kConsumerThreads) return;
  tma_prefetch_descriptor(cache_map);
  producer_walk<K::kRows, K::kBlockN, K::kStages>(
      p, part, smem.empty, [&](const DecodeRequestView& pv, int tile, int s) {
        producer_load_tile<K::kBlockN, K::kChunks, K::kChunkCols, K::kChunkBytes, K::kTileTxBytes>(
            cache_map, p, pv, tile, smem.kv + s * K::kTileBytes, &smem.full[s], kv_hint);
      });
}

// A consumer thread's state over one piece: its four rows (keymajor_row)
// and the warpgroup's online softmax over the tiles it took.
template <class K>
struct KeymajorPiece {
  int key_limit[4];  // row i sees keys < key_limit[i] (its causal limit; rows past the request: all)
  float rsc[4];      // row i's factor from scores to log2 units
  int mask_from;     // tiles reaching past this key need masking
  Fp8SoftmaxState st;
  float o[K::kOBlocks][8];  // O^T, m64n16 accumulator blocks
};

// One of the walk's tiles, for the warpgroup that takes it.
struct KeymajorTile {
  int it;          // its index in the part's walk (the producer's count too)
  int g;           // the consumer warpgroup taking it: it % 2
  int stage;       // it % kStages
  uint32_t phase;  // the parity its stage's `full` barrier completes with
  uint8_t* kv;     // its stage
  uint8_t* p_box;  // the warpgroup's P^T box
  int key0;        // its first key in the request
  bool fix;        // it reaches past mask_from: scores masked per row
};

// The consumer warpgroups (threads below K::kConsumerThreads). For each
// piece of the part with rows in this CTA, between two barriers of both
// warpgroups (the previous piece's products and merge are done before Q and
// whatever load_q writes are overwritten): load_q(view). Then, for each
// tile of the piece this warpgroup takes, tile(view, tile, piece); at the
// end the two warpgroups' states are merged (keymajor_merge.cuh) and
// warpgroup 0 calls store(view, o, lse, slot) with the piece's normalized
// O^T and LSE (slot: the plan's partial slot, or -1: the final output).
// row_scale(n): packed row n's factor from scores to log2 units.
template <class K, class LoadQ, class RowScale, class Tile, class Store>
__device__ __forceinline__ void keymajor_consume(const DecodeParams& p, int part, const CtaSmem<K>& smem,
                                                 LoadQ&& load_q, RowScale&& row_scale, Tile&& tile_step,
                                                 Store&& store) {
  const int g = warpgroup_index(), t = threadIdx.x % 4;
  float* const stat = smem.template at<float>(K::kStatOffset);
  float* const merge = smem.template at<float>(K::kMergeOffset);
  int it = 0;  // tiles of the walk so far (both warpgroups count all of them)
  for_each_tile_piece<K::kRows>(p, part, K::kBlockN, [&](const auto& pv, int tile_begin, int tile_end, int slot) {
    named_barrier_sync(kFp8BarAll, K::kConsumerThreads);
    load_q(pv);
    named_barrier_sync(kFp8BarAll, K::kConsumerThreads);

    KeymajorPiece<K> s;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int n = keymajor_row(i, t), gr = pv.row0 + n;
      s.key_limit[i] = gr < pv.rows ? pv.seq_len - pv.s_q + gr / p.num_heads + 1 : pv.seq_len;
      s.rsc[i] = row_scale(n);
      s.st.m[i] = -INFINITY;
      s.st.l[i] = 0.f;
    }
    s.mask_from = pv.seq_len - pv.s_q + 1;
#pragma unroll
    for (int mb = 0; mb < K::kOBlocks; ++mb) {
#pragma unroll
      for (int i = 0; i < 8; ++i) s.o[mb][i] = 0.f;
    }

    for (int tile = tile_begin; tile < tile_end; ++tile, ++it) {
      if (it % 2 != g) continue;
      const int stage = it % K::kStages, key0 = tile * K::kBlockN;
      tile_step(pv,
                KeymajorTile{it, g, stage, uint32_t(it / K::kStages) & 1, smem.kv + stage * K::kTileBytes,
                             smem.p + g * K::kQBoxBytes, key0, key0 + K::kBlockN > s.mask_from},
                s);
    }
    keymajor_hand_over<K>(s.st, s.o, g, smem.row_sum, stat, merge);
    if (g == 1) return;
    float lse[4];
    keymajor_merge_warpgroups<K>(p, s.st, s.o, smem.row_sum, stat, merge, lse);
    store(pv, s.o, lse, slot);
  });
}

// The kernel's warp roles after its shared memory is set up: the producer
// warpgroup (keymajor_produce) and the consumers (keymajor_consume).
template <class K, class LoadQ, class RowScale, class Tile, class Store>
__device__ __forceinline__ void keymajor_roles(const DecodeParams& p, const CUtensorMap* cache_map, CacheHint kv_hint,
                                               const CtaSmem<K>& smem, LoadQ&& load_q, RowScale&& row_scale,
                                               Tile&& tile_step, Store&& store) {
  const int part = blockIdx.y;
  if (threadIdx.x >= K::kConsumerThreads) {
    keymajor_produce<K>(p, part, cache_map, smem, kv_hint);
    return;
  }
  setmaxnreg_inc<K::kConsumerRegs>();
  keymajor_consume<K>(p, part, smem, load_q, row_scale, tile_step, store);
}

}  // namespace lattn::cuda::sm90
