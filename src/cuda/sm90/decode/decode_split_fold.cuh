// src/cuda/sm90/decode/decode_split_fold.cuh — the Hopper decode kernel's
// side of the batch-invariant left fold (smxx/decode_fold.cuh), the wgmma
// counterpart of sm80/decode/decode_split_fold.cuh: a CTA that walks several
// splits of one request starting at its first split folds each finished
// split into f32 accumulators instead of writing it as a partial result, with
// the combine kernel's per-output arithmetic, so that a request walked by one
// CTA (large batches: no partials, the copy pipeline never restarts) gets the
// bits it gets when its splits run on many CTAs and the combine folds their
// partials (small batches).
//
// A split's result as write_o (decode_epilogue.cuh) would write it: out_s =
// O * (out_scale / l) per output and LSE (m + log2 l) ln 2
// (row_scale_and_lse), l the full row sum of both warpgroups; the fold then
// takes (out_s, LSE) exactly as the combine reads them back.
//
// Where the accumulators live: 64 rows x 512 f32 (128 KB) per CTA do not fit
// the consumers' registers (O already takes 128 of 240) nor the shared memory
// (Q and the two KV stages take 216 KB), so they go to the plan's fold scratch
// (plan.fold_o, one 128 KB block per part and M tile) in global memory, where
// each thread reads and writes only its own outputs (no barrier, program
// order), through L2. What a fold costs is the time the consumers wait for
// their accumulators while the copy pipeline (two tiles) runs dry — in the
// benchmarks every CTA reaches a split boundary at once — so the scratch is
// laid out and read for the fewest round trips (docs/perf.md, "Batch-invariant
// mode", 9th session):
//  * thread-major: a thread's 128 accumulators are 32 float4 at
//    block[v * 256 + thread] (v = 16 i + n / 2 holds pairs n, n + 1 of its row
//    i), so a warp's access is 512 contiguous bytes and a thread needs 32
//    vector loads, not 64;
//  * half of them (16 float4) in flight at once: two rounds of loads, not
//    four (issuing the first half before the row sums' barrier, to overlap
//    it, spilled 1 KB);
//  * the lines kept in L2 (evict-last; the KV tiles stream through it with
//    evict-first), and prefetched into it a tile or two before a boundary
//    (fold_prefetch), in case the KV stream evicted them anyway;
//  * rows the M tile does not hold (pv.rows) neither read nor written.
// The per-output arithmetic is unchanged: the layout is the CTA's own.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "cuda/common/cuda_check.h"
#include "cuda/sm90/decode/decode_epilogue.cuh"
#include "cuda/smxx/decode_fold.cuh"

namespace lattn::cuda::sm90 {

// The fold of one piece, per consumer thread: the LSE of its two rows' folded
// splits so far (every thread of a row's quad and of both warpgroups keeps
// the same values) and whether anything was folded yet (the scratch holds
// stale values until then).
struct SplitFold {
  float lse[2] = {-INFINITY, -INFINITY};
  bool empty = true;
};

// The scratch of one CTA: float4 v of consumer thread t at [v * kConsumerThreads + t].
template <class K>
struct FoldLayout {
  static constexpr int kVecs = K::kColsPerWarpgroup / 8;  // float4 per thread (o's 128 floats): 2 rows x 16
  static constexpr int kRowVecs = kVecs / 2;
  static constexpr int kChunk = kVecs / 2;  // float4 loads in flight per thread: two rounds
  static_assert(K::kBlockM * K::kL == K::kConsumerThreads * kVecs * 4, "the block holds every thread's outputs");
};

// Measurement knobs, LATTN_HOPPER_FOLD_KNOBS (read at each launch of the
// folding kernel; none changes a bit of the result, only where and how the
// accumulators travel): bit 0, no L2 prefetch before a boundary; bit 1, no
// evict-last hint. One copy per instantiation unit (static), set by its
// launcher (update_fold_knobs).
static __device__ int g_fold_knobs = 0;
enum : int { kFoldNoPrefetch = 1, kFoldNoEvictLast = 2 };

[[maybe_unused]] static void update_fold_knobs(cudaStream_t stream) {
  static int current = 0;  // this unit's value on the device (launches of one process share it)
  static int pending = 0;  // the source of the copy, alive until it runs
  const char* env = std::getenv("LATTN_HOPPER_FOLD_KNOBS");
  const int want = env && *env ? std::atoi(env) & 3 : 0;
  if (want == current) return;
  pending = want;
  LATTN_CUDA_CHECK(cudaMemcpyToSymbolAsync(g_fold_knobs, &pending, sizeof(int), 0, cudaMemcpyHostToDevice, stream));
  current = want;
}

// This CTA's scratch block (M tile of pv, part blockIdx.y), offset to this
// consumer thread's first float4.
template <class K>
__device__ __forceinline__ float4* fold_block(const DecodeParams& p, const DecodeRequestView& pv) {
  return reinterpret_cast<float4*>(p.plan.fold_o + (int64_t(blockIdx.y) * p.plan.rows_capacity + pv.row0) * K::kL) +
         threadIdx.x;
}

// L2 policy of the scratch: kept against the streamed KV tiles (evict-last),
// or evict-normal (knob kFoldNoEvictLast).
__device__ __forceinline__ uint64_t fold_keep_policy() {
  uint64_t policy;
  if (g_fold_knobs & kFoldNoEvictLast) {
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  }
  return policy;
}
__device__ __forceinline__ float4 fold_load(const float4* a, uint64_t policy) {
  float4 v;
  asm volatile("ld.global.cg.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(a), "l"(policy)
               : "memory");
  return v;
}
__device__ __forceinline__ void fold_store(float4* a, const float4& v, uint64_t policy) {
  asm volatile("st.global.cg.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(a), "f"(v.x), "f"(v.y),
               "f"(v.z), "f"(v.w), "l"(policy)
               : "memory");
}

// Called by every consumer thread at each tile of a folding piece, before
// the tile's wait: `lead` tiles before a split boundary whose fold reads the
// scratch (every fold but the piece's first), lane v of each warp whose rows
// exist asks L2 for its warp's float4 v of the block (512 bytes: 16 KB a warp,
// the block's 128 KB over the 8 warps). A hint only.
template <class K>
__device__ __forceinline__ void fold_prefetch(const DecodeParams& p, const DecodeRequestView& pv, const SplitFold& f,
                                              int tile, int tile_end, int split_tiles) {
  constexpr int kLead = 2;
  const int boundary = min((tile / split_tiles + 1) * split_tiles, tile_end);
  if (f.empty || boundary - tile != min(kLead, split_tiles) || (g_fold_knobs & kFoldNoPrefetch)) return;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  if (pv.row0 + 16 * w >= pv.rows) return;
  const float4* warp_block = fold_block<K>(p, pv) - lane;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], 512;" ::"l"(warp_block + lane * K::kConsumerThreads)
               : "memory");
}

// The split that (st, o) hold is finished: fold it into f. Every consumer
// thread calls it (share_row_sums syncs the consumers). last: the piece's
// last split — the folded values are left in `o` for write_folded; else they
// go to the scratch, and the caller starts the next split from scratch.
template <class K>
__device__ __forceinline__ void fold_split(const DecodeParams& p, const DecodeRequestView& pv, SplitFold& f,
                                           const SoftmaxState& st, float (&o)[K::kColsPerWarpgroup / 2], int g,
                                           float* row_sum, bool last) {
  using L = FoldLayout<K>;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  bool have[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) have[i] = pv.row0 + 16 * w + lane / 4 + 8 * i < pv.rows;
  float4* acc = fold_block<K>(p, pv);
  const uint64_t keep = fold_keep_policy();
  // float4 v: row i = v / kRowVecs, pairs n = 2 (v % kRowVecs) and n + 1 of o.
  float4 a[L::kChunk];
  auto load_chunk = [&](int v0) {
#pragma unroll
    for (int k = 0; k < L::kChunk; ++k) {
      const int v = v0 + k;
      a[k] = f.empty || !have[v / L::kRowVecs] ? make_float4(0.f, 0.f, 0.f, 0.f)
                                               : fold_load(acc + v * K::kConsumerThreads, keep);
    }
  };
  float sums[2];
  share_row_sums<K>(st, g, row_sum, sums);
  float inv[2];
  FoldWeights wt[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float lse;
    row_scale_and_lse(sums[i], st.m[i], p.out_scale, inv[i], lse);
    wt[i] = fold_weights(f.lse[i], lse);
    f.lse[i] = wt[i].lse;
  }
#pragma unroll
  for (int v0 = 0; v0 < L::kVecs; v0 += L::kChunk) {
    load_chunk(v0);
#pragma unroll
    for (int k = 0; k < L::kChunk; ++k) {
      const int v = v0 + k, i = v / L::kRowVecs, n = 2 * (v % L::kRowVecs);
      const int j0 = 4 * n + 2 * i, j1 = 4 * (n + 1) + 2 * i;  // pairs n and n + 1 of row i in o
      a[k].x = fold_elem(a[k].x, __fmul_rn(o[j0], inv[i]), wt[i]);
      a[k].y = fold_elem(a[k].y, __fmul_rn(o[j0 + 1], inv[i]), wt[i]);
      a[k].z = fold_elem(a[k].z, __fmul_rn(o[j1], inv[i]), wt[i]);
      a[k].w = fold_elem(a[k].w, __fmul_rn(o[j1 + 1], inv[i]), wt[i]);
      if (last) {
        o[j0] = a[k].x, o[j0 + 1] = a[k].y, o[j1] = a[k].z, o[j1 + 1] = a[k].w;
      } else if (have[i]) {
        fold_store(acc + v * K::kConsumerThreads, a[k], keep);
      }
    }
  }
  f.empty = false;
}

// The folded rows of a piece (values in o, LSE in f): slot < 0, the final
// output and LSE, exactly as the combine would store them; else into partial
// slot `slot` (the piece's last split's), with LSE -inf in the `empty` slots
// before it (the piece's earlier splits, which the combine's fold then keeps
// at nothing, so it takes this slot exactly).
template <class K>
__device__ __forceinline__ void write_folded(const DecodeParams& p, const DecodeRequestView& pv, const SplitFold& f,
                                             const float (&o)[K::kColsPerWarpgroup / 2], int slot, int empty, int g) {
  using T = typename K::T;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
  const int col0 = g * K::kColsPerWarpgroup + 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = pv.row0 + r0 + 8 * i;
    if (gr >= pv.rows) continue;
    const bool lse_owner = g == 0 && lane % 4 == 0;
    if (slot < 0) {
      const int j = gr / p.num_heads, h = gr % p.num_heads;
      T* out = static_cast<T*>(p.out) + (pv.q0 + j) * p.out_stride_t + h * p.out_stride_h + col0;
#pragma unroll
      for (int n = 0; n < K::kColsPerWarpgroup / 8; ++n) {
        *reinterpret_cast<uint32_t*>(out + 8 * n) = sm80::pack2<T>(o[4 * n + 2 * i], o[4 * n + 2 * i + 1]);
      }
      if (p.lse && lse_owner) p.lse[h * p.lse_stride_h + int64_t(pv.q0 + j) * p.lse_stride_t] = f.lse[i];
    } else {
      float* out = p.plan.partial_o + (int64_t(slot) * p.plan.rows_capacity + gr) * K::kL + col0;
#pragma unroll
      for (int n = 0; n < K::kColsPerWarpgroup / 8; ++n) {
        *reinterpret_cast<float2*>(out + 8 * n) = make_float2(o[4 * n + 2 * i], o[4 * n + 2 * i + 1]);
      }
      if (lse_owner) {
        for (int s = slot - empty; s < slot; ++s)
          p.plan.partial_lse[int64_t(s) * p.plan.rows_capacity + gr] = -INFINITY;
        p.plan.partial_lse[int64_t(slot) * p.plan.rows_capacity + gr] = f.lse[i];
      }
    }
  }
}

}  // namespace lattn::cuda::sm90
