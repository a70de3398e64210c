// src/cuda/sm80/decode/decode_kernel.cuh — the absorbed MLA decode kernel
// (tensor cores through mma.sync, so it runs on sm80 and later).
//
// Grid (m_tiles, num_parts): CTA (mt, part) computes packed rows
// [mt * kBlockM, (mt + 1) * kBlockM) of every request piece that the split-KV
// plan gives to `part` (decode_params.h). Per piece: Q tile and first KV tile
// by cp.async, then for each KV tile: wait, start the next tile's copy (double
// buffering), S = Q K^T, online softmax, O += P V; finally the epilogue.
#pragma once

#include <type_traits>

#include "cuda/sm80/decode/decode_epilogue.cuh"
#include "cuda/sm80/decode/decode_mainloop.cuh"
#include "cuda/sm80/decode/decode_split_fold.cuh"
#include "cuda/smxx/decode_pieces.cuh"

namespace lattn::cuda::sm80 {

// Attends rows [rv.row0, +kBlockM) of one request to its KV tiles
// [tile_begin, tile_end) and writes the result (slot < 0: final; else partial).
// kFold (batch-invariant plans whose kernel folds, 16-row tiles; a kernel of
// its own, since the accumulators cost registers): the piece is one or more
// whole splits of split_tiles tiles; each split is computed from scratch, and
// at its end folded into registers when the piece starts at the request's
// first split (decode_split_fold.cuh), else written to its own slot (slot,
// slot + 1, ...).
template <class K, bool kFold = false>
__device__ __forceinline__ void attend_piece(const DecodeParams& p, const DecodeRequestView& rv, int tile_begin,
                                             int tile_end, int slot, char* smem, int split_tiles = 0) {
  using T = typename K::T;
  T* q_smem = reinterpret_cast<T*>(smem);
  T* k_smem = reinterpret_cast<T*>(smem + K::kQBytes);
  uint8_t* staging = reinterpret_cast<uint8_t*>(smem + K::kQBytes + K::kKBytes);
  T* p_smem = reinterpret_cast<T*>(smem + K::kQBytes + K::kKBytes + K::kStagingBytes);
  float* reduce = reinterpret_cast<float*>(smem + K::kQBytes + K::kKBytes + K::kStagingBytes + K::kPBytes);
  float* row_vec = reduce + K::kColGroups * K::kBlockM;
  constexpr int kTileElems = K::kBlockN * K::kD;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rg = warp % K::kRowGroups, cg = warp / K::kRowGroups;

  // Causal limit of this thread's two phase-1 rows: query token j sees keys
  // [0, seq_len - s_q + j]; padding rows (past rv.rows) are never written.
  int key_limit[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = rv.row0 + rg * 16 + lane / 4 + 8 * i;
    key_limit[i] = gr < rv.rows ? rv.seq_len - rv.s_q + gr / p.num_heads + 1 : rv.seq_len;
  }
  // Tiles that reach past the smallest limit of the CTA need masking.
  const int mask_from = rv.seq_len - rv.s_q + 1;

  SoftmaxState st{{-INFINITY, -INFINITY}, {0.f, 0.f}};
  float o[K::kMTiles][K::kNTilesO][4];
  zero_o<K>(o);

  // Stage s of the ring (16-bit: a K tile; fp8: a raw staging tile).
  auto stage = [&](int s) -> void* {
    return K::kFp8 ? static_cast<void*>(staging + s * kTileElems) : static_cast<void*>(k_smem + s * kTileElems);
  };
  // Prologue: Q and the first kStages - 1 tiles, one commit group per tile
  // (Q rides with the first), so wait_group<kStages - 2> means "tile it landed".
  // Q in registers: Q first goes, as its own group, through a buffer that is
  // free until the loop's first barrier (the last stage; fp8: the converted
  // tile), and the wait count is the same because Q's group comes first.
  QFragments<K> qf;
  T* q_tile = K::kQInRegs ? (K::kFp8 ? k_smem : k_smem + (K::kStages - 1) * kTileElems) : q_smem;
  load_q<K>(p, rv, q_tile);
  if constexpr (K::kQInRegs) cp_async_commit();
#pragma unroll
  for (int s = 0; s < K::kStages - 1; ++s) {
    if (tile_begin + s < tile_end) load_kv<K>(p, rv, tile_begin + s, stage(s));
    cp_async_commit();
  }
  if constexpr (K::kQInRegs) {
    cp_async_wait<K::kStages - 1>();  // Q's group
    __syncthreads();
    load_q_fragments<K>(q_tile, qf);  // the loop's first barrier orders this before the buffer is reused
  }

  // Several splits in this piece (only in plans whose kernel folds: 16-row tiles).
  constexpr bool kCanFold = kFold && K::kMTiles == 1;
  const bool multi = kCanFold && split_tiles > 0 && tile_end - tile_begin > split_tiles;
  const bool fold = multi && tile_begin == 0;
  using Fold = std::conditional_t<kCanFold, SplitFold<K>, int>;
  [[maybe_unused]] Fold folded{};
  if constexpr (kCanFold) folded = make_split_fold<K>(p, rv);

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int it = tile - tile_begin;
    if constexpr (kCanFold) {
      if (multi && it > 0 && tile % split_tiles == 0) {  // a split ends before this tile
        if (fold) {
          fold_split<K>(p, folded, st, o, reduce, row_vec, false);
        } else {
          write_o<K>(p, rv, st, o, slot + (tile - tile_begin) / split_tiles - 1, reduce, row_vec);
          zero_o<K>(o);
          st = SoftmaxState{{-INFINITY, -INFINITY}, {0.f, 0.f}};
        }
      }
    }
    cp_async_wait<K::kStages - 2>();
    __syncthreads();  // tile `tile` is in shared memory; every warp is done with tile - 1
    const int next = tile + K::kStages - 1;
    if (next < tile_end) load_kv<K>(p, rv, next, stage((it + K::kStages - 1) % K::kStages));
    cp_async_commit();
    const T* kv;
    if constexpr (K::kFp8) {
      convert_fp8_tile<K>(staging + (it % K::kStages) * kTileElems, k_smem);
      __syncthreads();
      kv = k_smem;
    } else {
      kv = k_smem + (it % K::kStages) * kTileElems;
    }

    float s[K::kNTilesS][4];
    if constexpr (K::kQInRegs) {
      compute_qk_qregs<K>(qf, kv, cg, s);
    } else {
      compute_qk<K>(q_smem, kv, rg, cg, s);
    }
    const int key0 = tile * K::kBlockN;
    update_softmax<K>(s, st, key0, key0 + K::kBlockN > mask_from, key_limit, p.scale_log2, rg, cg, reduce, row_vec,
                      p_smem);
    if (mask_from < rv.seq_len && key0 + K::kBlockN > mask_from) {
      // Keys some row may not see (docs/mla.md, "NaN and inf"): non-finite
      // values zeroed, and a row that sees such a key is NaN (its row sum l
      // is NaN from here on, so the epilogue writes NaN and LSE NaN).
      const int first_bad = sanitize_masked_keys<K>(const_cast<T*>(kv), key0, max(key0, mask_from),
                                                    min(key0 + K::kBlockN, rv.seq_len), reinterpret_cast<int*>(reduce));
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (first_bad < key_limit[i]) st.l[i] = NAN;
      }
    }
    compute_pv<K>(p_smem, kv, row_vec, warp, o);
  }
  cp_async_wait<0>();  // only empty groups can be pending; the next piece starts from a clean state
  if constexpr (kCanFold) {
    if (fold) {
      fold_split<K>(p, folded, st, o, reduce, row_vec, true);  // the folded values, in o
      // Final, or the fold of the piece's splits into its last split's slot.
      const int last = (tile_end - 1) / split_tiles;
      write_folded<K>(p, rv, folded, o, slot < 0 ? -1 : slot + last, last);
    } else if (multi) {
      write_o<K>(p, rv, st, o, slot + (tile_end - 1) / split_tiles - tile_begin / split_tiles, reduce, row_vec);
    } else {
      write_o<K>(p, rv, st, o, slot, reduce, row_vec);
    }
  } else {
    write_o<K>(p, rv, st, o, slot, reduce, row_vec);
  }
  __syncthreads();  // the next piece reuses shared memory
}

// The largest dynamic shared memory per block of any sm8x GPU (A100: 163 KB).
// sm_80 code runs only on sm8x GPUs, so a configuration needing more is never
// launched there (the launchers check the device) and its sm_80 body is not
// compiled: it would only cost build time (and spill, for 64x64 tiles).
constexpr size_t kSm8xMaxSmemPerBlock = 166912;

// A kernel's body, compiled for every architecture where configuration K's
// shared memory can fit (sm_8x code for a larger K only traps). Shared by the
// decode kernel and the sparse kernel (sm80/sparse/). `Body` is a generic
// lambda called with K, so the body is not even instantiated where it traps.
template <class K, class Body>
__device__ __forceinline__ void kernel_body_if_fits(Body body) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  if constexpr (K::kSmemBytes > kSm8xMaxSmemPerBlock) {
    __trap();
  } else {
    body(K{});
  }
#else
  body(K{});
#endif
}

template <class K, bool kFold>
__device__ __forceinline__ void decode_kernel_body(const DecodeParams& p);

// kFold: the batch-invariant plans' kernel that folds a piece's splits
// (plan.fold_splits; 16-row tiles only).
template <class K, bool kFold = false>
__global__ void __launch_bounds__(K::kThreads, 1) mla_decode_kernel(const __grid_constant__ DecodeParams p) {
  kernel_body_if_fits<K>([&](auto k) { decode_kernel_body<decltype(k), kFold>(p); });
}

// attend_piece's split_tiles: the split size of a request of seq_len keys in
// batch-invariant plans whose kernel folds splits, else 0.
template <class K>
__device__ __forceinline__ int decode_fold_split_tiles(const DecodeParams& p, int seq_len) {
  if (!p.plan.batch_invariant || !p.plan.fold_splits) return 0;
  return batch_invariant_split_tiles((seq_len + K::kBlockN - 1) / K::kBlockN, p.plan.split_rule);
}

template <class K, bool kFold>
__device__ __forceinline__ void decode_kernel_body(const DecodeParams& p) {
  extern __shared__ __align__(128) char smem[];
  // The plan's pieces for this part (smxx/decode_pieces.cuh, shared with the
  // Hopper kernels and decode_combine), restricted to this CTA's M tile.
  for_each_tile_piece<K::kBlockM>(
      p, blockIdx.y, K::kBlockN, [&](const auto& rv, int tile_begin, int tile_end, int slot) {
        if constexpr (kFold) {
          attend_piece<K, true>(p, rv, tile_begin, tile_end, slot, smem, decode_fold_split_tiles<K>(p, rv.seq_len));
        } else {
          attend_piece<K>(p, rv, tile_begin, tile_end, slot, smem);
        }
      });
}

}  // namespace lattn::cuda::sm80
