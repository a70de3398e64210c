// src/cuda/sm90/decode/decode_producer.cuh — the producer side of the KV
// ring of the Hopper decode kernels (decode_kernel.cuh, and the key-major
// ones through keymajor_walk.cuh): one thread walks the pieces the
// consumers walk and, tile after tile, waits until the consumers have
// released the tile's stage, then issues its copy.
#pragma once

#include <cuda.h>

#include "cuda/common/index_check.cuh"
#include "cuda/sm90/common/mbarrier.cuh"
#include "cuda/sm90/common/tma.cuh"
#include "cuda/smxx/decode_params.h"
#include "cuda/smxx/decode_pieces.cuh"

namespace lattn::cuda::sm90 {

// Where KV tile `tile` (keys [kBlockN tile, +kBlockN)) of the view's request
// lies: its page (the checked block id, or -1 for a bad one) and first row.
struct TileSource {
  int page, row;
};
template <int kBlockN>
__device__ __forceinline__ TileSource tile_source(const DecodeParams& p, const DecodeRequestView& v, int tile) {
  const int key0 = tile * kBlockN;
  return {int(checked_block_id(v.table, key0 / p.block_size, p.table_width, p.num_blocks, p.index_violations)),
          key0 % p.block_size};
}

// Copies KV tile `tile` of the view's request (keys [kBlockN tile, +kBlockN),
// inside one page: the kernels need the page size to be a multiple of
// kBlockN) into `dst` as kBoxes boxes of [kBlockN keys][kBoxCols columns],
// kBoxBytes apart, completing on `full` with kTxBytes in all (16-bit caches:
// 9 boxes of 64 columns; fp8 caches: 9 boxes of 64 bytes). Keys past seq_len
// come from the same page (garbage or poison there: the consumers mask their
// scores and zero or sanitize their V rows). A bad block id
// (index_check.cuh) is recorded and the copy aimed at page -1, outside the
// tensor map: the copy engine fills the boxes with zeros. `hint`: the L2
// policy of the copies (decode_host.cu chooses it).
template <int kBlockN, int kBoxes, int kBoxCols, int kBoxBytes, uint32_t kTxBytes>
__device__ __forceinline__ void producer_load_tile(const CUtensorMap* cache_map, const DecodeParams& p,
                                                   const DecodeRequestView& v, int tile, uint8_t* dst, uint64_t* full,
                                                   CacheHint hint) {
  const TileSource src = tile_source<kBlockN>(p, v, tile);
  mbarrier_arrive_expect_tx(full, kTxBytes);
#pragma unroll
  for (int c = 0; c < kBoxes; ++c) {
    tma_load_3d(dst + c * kBoxBytes, cache_map, full, c * kBoxCols, src.row, src.page, hint);
  }
}

// Before a stage (or part of one) is refilled with tile `tile`: its
// block-table entry is brought into L1, so the copy leaves when the stage is
// released, not a global-memory round trip later (the load reads the entry;
// an out-of-range column is left to its check); then the wait for the
// release (the phase that completed round `round` of the barrier), with a
// suspend-time hint.
template <int kBlockN>
__device__ __forceinline__ void wait_to_refill(const DecodeParams& p, const DecodeRequestView& v, int tile,
                                               uint64_t* empty, int round) {
  const int64_t col = int64_t(tile) * kBlockN / p.block_size;
  if (p.table_width <= 0 || col < p.table_width) {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(v.table + col));
  }
  mbarrier_wait_sleeping(empty, round & 1);
}

// Tile `it` of the walk (all pieces of the part counted) goes to stage
// it % kStages; from its second round on, a stage is refilled only after its
// `empty` barrier completed the round before. load(view, tile, stage) issues
// the copy (and its full barrier's expect_tx).
template <int kBlockM, int kBlockN, int kStages, class Load>
__device__ __forceinline__ void producer_walk(const DecodeParams& p, int part, uint64_t* empty, Load&& load) {
  int it = 0;  // tiles issued so far
  for_each_tile_piece<kBlockM>(p, part, kBlockN, [&](const DecodeRequestView& v, int tile_begin, int tile_end, int) {
    for (int tile = tile_begin; tile < tile_end; ++tile, ++it) {
      const int s = it % kStages, round = it / kStages;
      if (round > 0) {
        // wait_to_refill's steps, written out: calling it gave the same PTX
        // up to register numbering, but ptxas then scheduled the fp8 and
        // the folding 64-row kernels 16 instructions longer (not timed; the
        // code as measured is kept).
        const int64_t col = int64_t(tile) * kBlockN / p.block_size;
        if (p.table_width <= 0 || col < p.table_width) {
          asm volatile("prefetch.global.L1 [%0];" ::"l"(v.table + col));
        }
        mbarrier_wait_sleeping(&empty[s], (round - 1) & 1);
      }
      load(v, tile, s);
    }
  });
}

}  // namespace lattn::cuda::sm90
