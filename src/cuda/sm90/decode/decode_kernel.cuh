// src/cuda/sm90/decode/decode_kernel.cuh — the Hopper absorbed-MLA decode
// kernel: grid (m_tiles, num_parts) of the `cuda` backend's split-KV plan
// (smxx/decode_scheduler), 384 threads: two consumer warpgroups and a
// producer warpgroup (one thread of it issues the copies). CTA (mt, part) computes packed rows [64 mt, +64) of every
// (request, tile range) piece the plan gives to `part`; the producer walks the
// same pieces and keeps a 2-stage ring of 72 KB KV tiles full (TMA through the
// block table, `full` barriers with transaction counts; the consumers release
// a stage on its `empty` barrier when their wgmmas have read it).
//
// sm_90a only: the body compiles to nothing for other targets (the CMake arch
// list also builds sm_80, where this kernel is never launched).
#pragma once

#include <climits>

#include "cuda/sm90/common/cta_smem.cuh"
#include "cuda/sm90/decode/decode_epilogue.cuh"
#include "cuda/sm90/decode/decode_mainloop.cuh"
#include "cuda/sm90/decode/decode_producer.cuh"
#include "cuda/sm90/decode/decode_split_fold.cuh"
#include "cuda/smxx/decode_pieces.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LATTN_SM90_DECODE_BODY 1
#endif

namespace lattn::cuda::sm90 {

// kFold: the batch-invariant plans whose pieces may hold several splits
// (plan.fold_splits; decode_params.h): each split is computed from scratch
// and, at its end, folded (decode_split_fold.cuh) when the piece starts at
// the request's first split, else written to its own slot (slot, slot + 1,
// ...). The producer walks the same tiles either way: the copy pipeline runs
// on across split boundaries. A kernel of its own, so that the default
// mode's code is not touched.
template <class K, bool kFold = false>
__global__ void __launch_bounds__(K::kThreads, 1)
    mla_decode_sm90_kernel(const __grid_constant__ DecodeParams p, const __grid_constant__ CUtensorMap cache_map,
                           CacheHint kv_hint) {
#ifdef LATTN_SM90_DECODE_BODY
  extern __shared__ uint8_t smem_raw[];
  const CtaSmem<K> smem(smem_raw);
  uint8_t *const q_smem = smem.q, *const kv_smem = smem.kv, *const p_smem = smem.p;
  float *const row_max = smem.row_max, *const row_sum = smem.row_sum;
  uint64_t *const full = smem.full, *const empty = smem.empty;
  int* bad_key = smem.template at<int>(K::kBadKeyOffset);  // [2], by tile parity
  const int part = blockIdx.y;
  // full: the producer's arrive.expect_tx; empty: every consumer warp, after its wgmmas.
  smem.init_ring(1, K::kConsumerThreads / 32);

  if (threadIdx.x >= K::kConsumerThreads) {
    // ---- producer warpgroup: one thread issues the copies ----
    setmaxnreg_dec<K::kProducerRegs>();
    if (threadIdx.x != K::kConsumerThreads) return;
    tma_prefetch_descriptor(&cache_map);
    producer_walk<K::kBlockM, K::kBlockN, K::kStages>(
        p, part, empty, [&](const DecodeRequestView& pv, int tile, int s) {
          producer_load_tile<K::kBlockN, K::kBoxes, K::kBoxCols, K::kBlockN * 128, K::kKVTileTxBytes>(
              &cache_map, p, pv, tile, kv_smem + s * K::kKVTileBytes, &full[s], kv_hint);
        });
    return;
  }

  // ---- consumer warpgroups ----
  setmaxnreg_inc<K::kConsumerRegs>();
  const int g = warpgroup_index();
  int it = 0;  // tiles consumed so far
  for_each_tile_piece<K::kBlockM>(p, part, K::kBlockN, [&](const auto& pv, int tile_begin, int tile_end, int slot) {
    int key_limit[2];
    SoftmaxState st;
    float o[K::kColsPerWarpgroup / 2];
    const int mask_from = start_piece<K>(p, pv, q_smem, key_limit, st, o);

    // Several splits in this piece (kFold plans only): tile_begin and
    // tile_end are split boundaries (decode_pieces.cuh).
    [[maybe_unused]] int split_tiles = 0;
    [[maybe_unused]] bool multi = false, fold = false;
    [[maybe_unused]] SplitFold folded;
    if constexpr (kFold) {
      split_tiles = batch_invariant_split_tiles((pv.seq_len + K::kBlockN - 1) / K::kBlockN, p.plan.split_rule);
      multi = tile_end - tile_begin > split_tiles;
      fold = multi && tile_begin == 0;
    }

    for (int tile = tile_begin; tile < tile_end; ++tile, ++it) {
      if constexpr (kFold) {
        if (multi && tile > tile_begin && tile % split_tiles == 0) {  // a split ends before this tile
          if (fold) {
            fold_split<K>(p, pv, folded, st, o, g, row_sum, false);
          } else {
            write_o<K>(p, pv, st, o, slot + (tile - tile_begin) / split_tiles - 1, g, row_sum);
          }
          st = SoftmaxState{{-INFINITY, -INFINITY}, {0.f, 0.f}};
#pragma unroll
          for (int i = 0; i < K::kColsPerWarpgroup / 2; ++i) o[i] = 0.f;
        }
      }
      const int s = it % K::kStages, round = it / K::kStages;
      uint8_t* kv = kv_smem + s * K::kKVTileBytes;
      mbarrier_wait(&full[s], round & 1);
      const int key0 = tile * K::kBlockN;
      if (key0 + K::kBlockN > pv.seq_len) zero_tail_rows<K>(kv, pv.seq_len - key0, g);

      // Keys only some rows may see (the request's last s_q - 1) lie in this
      // tile: their non-finite V values are zeroed below. The flag of this
      // tile's parity was last read two tiles ago, before the row-max barrier
      // of the previous tile, so resetting it here races with nobody.
      const bool sanitize = mask_from < pv.seq_len && key0 + K::kBlockN > mask_from;
      if (sanitize && threadIdx.x == 0) bad_key[it & 1] = INT_MAX;

      float sc[K::kKeysPerWarpgroup / 2];
      compute_qk<K>(q_smem, kv, g, sc);
      float alpha[2];
      softmax_tile<K>(sc, st, key0, key0 + K::kBlockN > mask_from, key_limit, p.scale_log2, g, row_max, p_smem, alpha);
      if (sanitize) {
        sanitize_masked_keys<K>(kv, key0, max(key0, mask_from), min(key0 + K::kBlockN, pv.seq_len), &bad_key[it & 1]);
      }
      named_barrier_sync(kBarP, K::kConsumerThreads);  // both halves of P written (and fenced)
      if (sanitize) {
        const int first_bad = bad_key[it & 1];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (first_bad < key_limit[i]) st.l[i] = NAN;  // this row sees a non-finite value: NaN, as the math
        }
      }
      compute_pv<K>(p_smem, kv, g, o, alpha);
      mbarrier_arrive_per_warp(&empty[s]);  // this warp's wgmmas have read the stage
    }
    if constexpr (kFold) {
      if (fold) {
        fold_split<K>(p, pv, folded, st, o, g, row_sum, true);  // the folded values, in o
        // Final, or the fold of the piece's splits into its last split's slot.
        const int last = (tile_end - 1) / split_tiles;
        write_folded<K>(p, pv, folded, o, slot < 0 ? -1 : slot + last, last, g);
      } else if (multi) {
        write_o<K>(p, pv, st, o, slot + (tile_end - 1) / split_tiles - tile_begin / split_tiles, g, row_sum);
      } else {
        write_o<K>(p, pv, st, o, slot, g, row_sum);
      }
    } else {
      write_o<K>(p, pv, st, o, slot, g, row_sum);
    }
  });
#endif
}

}  // namespace lattn::cuda::sm90
