// src/cuda/sm90/sparse/sparse_kernel.cuh — sparse absorbed MLA on Hopper
// (wgmma, sm_90a): the dense Hopper decode kernel's consumers (S = Q K^T,
// online softmax, O += P V over 64-key tiles; sm90/decode/decode_mainloop.cuh)
// fed by a producer warpgroup that gathers each tile's rows from a token's
// index list instead of copying a page with TMA.
//
// CTA = (64 heads h0.., token t); 384 threads: consumer warpgroups 0 and 1,
// producer warpgroup 2. Per 64-entry index tile, the producer
//   1. (its warp 0) compacts the tile's valid slots (0 <= slot < num_slots;
//      -1 and slots past the cache dropped, duplicates kept) into the stage's
//      row list, so the invalid entries become a tail the consumers mask as a
//      sequence end is (every head of the CTA sees the same keys: compacting
//      only changes the order of the sum);
//   2. gathers the rows into the stage's swizzled bf16 tile — bf16 caches with
//      cp.async, fp8_ds_mla rows through registers (each 16-byte piece of
//      fp8 times its 128-column tile's scale, rounded to bf16 as the host
//      does; rope copied) — and zero-fills the rows past the count (0 * NaN
//      would be NaN in P V);
//   3. waits for its copies, fences them for the async proxy (wgmma reads
//      shared memory through it) and arrives on the stage's `full` barrier
//      (one arrival per producer thread).
// The consumers release a stage on its `empty` barrier after P V has read it.
// The epilogue writes out = O / l (times 1 / (1 + exp(sink - lse)) with a
// sink) and lse = ln sum exp(s): -inf and 0 for a head without keys, NaN
// when a selected key holds a NaN. docs/sparse.md describes it.
#pragma once

#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "cuda/sm80/mma.cuh"  // cp_async_16, pack2
#include "cuda/sm90/common/cta_smem.cuh"
#include "cuda/sm90/common/smem.cuh"
#include "cuda/sm90/decode/decode_epilogue.cuh"  // share_row_sums
#include "cuda/sm90/decode/decode_mainloop.cuh"
#include "cuda/sm90/sparse/sparse_traits.h"
#include "cuda/smxx/sparse_mla_params.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LATTN_SM90_SPARSE_BODY 1
#endif

namespace lattn::cuda::sm90 {

constexpr int kBarProducer = 4;  // the producer warpgroup's own named barrier (1..3: decode_mainloop.cuh)

// Producer warp 0: starts copying the raw indices of tile `tile` into
// `next` [64] (2 per lane, each lane its own: lane l's words l and 32 + l),
// by cp.async, so that no register waits for them; the producer's
// cp_async_wait at the end of the tile's gather completes them.
__device__ __forceinline__ void sparse_prefetch_indices(const SparseParams& p, const int32_t* idx, int tile,
                                                        uint32_t next) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int j = tile * 64 + 32 * i + lane;
    const bool in = j < p.topk;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(next + 4u * uint32_t(32 * i + lane)),
                 "l"(in ? idx + j : idx), "r"(in ? 4 : 0)
                 : "memory");
  }
}

// Producer warp 0: the raw indices of tile `tile` from `next` (-1 past topk).
__device__ __forceinline__ void sparse_read_indices(const SparseParams& p, int tile, uint32_t next, int32_t (&raw)[2]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int j = tile * 64 + 32 * i + lane;
    const int32_t v = ld_shared_s32(next + 4u * uint32_t(32 * i + lane));
    raw[i] = j < p.topk ? v : -1;
  }
}

// Producer warp 0: the valid slots of `raw`, in order, as cache offsets in
// 16-byte units (they fit 32 bits: the launcher checks the cache size), and
// their count.
__device__ __forceinline__ void sparse_compact(const SparseParams& p, const int32_t (&raw)[2], uint32_t slots,
                                               uint32_t count) {
  const int lane = threadIdx.x % 32;
  const int block_size = int(p.block_size);
  const uint32_t block16 = uint32_t(p.block_stride_bytes / 16), entry16 = uint32_t(p.entry_stride_bytes / 16);
  int n = 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int32_t s = raw[i];
    const bool ok = s >= 0 && s < p.num_slots;
    const unsigned ballot = __ballot_sync(0xffffffffu, ok);
    if (ok) {
      const uint32_t off = uint32_t(s / block_size) * block16 + uint32_t(s % block_size) * entry16;
      st_shared_s32(slots + 4u * uint32_t(n + __popc(ballot & ((1u << lane) - 1u))), int32_t(off));
    }
    n += __popc(ballot);
  }
  if (lane == 0) st_shared_s32(count, n);
}

// Producer: bf16 rows [0, count) of the stage's list into the swizzled tile
// (9 boxes of [64 rows][64 columns]), rows past count zero-filled. 36
// 16-byte cp.async per thread, consecutive threads on consecutive pieces of
// a row.
template <class K>
__device__ __forceinline__ void gather_bf16(const SparseParams& p, uint32_t slots, int count, uint32_t stage) {
  constexpr int kChunks = K::kD / 8;  // 72 pieces of 16 bytes per row
  const int pt = threadIdx.x - K::kConsumerThreads;
#pragma unroll 4
  for (int c = pt; c < K::kBlockN * kChunks; c += K::kProducerThreads) {
    const int row = c / kChunks, chunk = c % kChunks;
    const bool valid = row < count;
    const uint32_t off16 = valid ? uint32_t(ld_shared_s32(slots + 4u * uint32_t(row))) : 0u;
    const uint8_t* src = p.cache + (uint64_t(off16) + uint32_t(chunk)) * 16u;
    const uint32_t dst = stage + uint32_t(chunk / 8) * (K::kBlockN * 128) + uint32_t(row) * 128u +
                         uint32_t((chunk % 8) ^ (row % 8)) * 16u;
    sm80::cp_async_16(dst, valid ? src : p.cache, valid ? 16 : 0);
  }
}

// 16 fp8 e4m3 values times `scale`, rounded to bf16: two 16-byte pieces.
__device__ __forceinline__ void dequant16(uint4 raw, float scale, uint4& lo, uint4& hi) {
  const __nv_fp8x2_storage_t* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&raw);
  uint32_t w[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3)));
    w[i] = sm80::pack2<__nv_bfloat16>(f.x * scale, f.y * scale);
  }
  lo = make_uint4(w[0], w[1], w[2], w[3]);
  hi = make_uint4(w[4], w[5], w[6], w[7]);
}

// Producer: fp8_ds_mla rows [0, count) dequantized into the swizzled bf16
// tile, rows past count zero. Warp pw takes rows pw, pw + 4, ...; lane l the
// 16 latents [16 l, 16 l + 16) of each (one 512-byte row per warp load) and
// their tile's scale; the rope (64 bf16 = 8 pieces per row) goes by cp.async.
// The warp first asks L2 for its 16 whole rows (3 line prefetches per lane),
// so that the loads, kFp8Batch rows at a time, mostly hit L2.
template <class K>
__device__ __forceinline__ void gather_ds_mla(const SparseParams& p, uint32_t slots, int count, uint32_t stage) {
  constexpr int kRowsPerWarp = K::kBlockN / 4, kBatch = K::kFp8Batch;
  const int pt = threadIdx.x - K::kConsumerThreads;
  const int pw = pt / 32, lane = pt % 32;
  // Six 128-byte lines cover any 656-byte row at a 16-byte offset (the last
  // byte is at most 112 + 655 = 767 past its first line's start), so a warp's
  // 16 rows are 96 line prefetches: 3 per lane, one instruction each for the
  // warp. (A bulk prefetch per row takes its address from uniform registers:
  // the warp's 16 ran one after another.)
  static_assert(kRowsPerWarp * 6 == 3 * 32, "3 line prefetches per lane");
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    const int i = 32 * k + lane, row = pw + 4 * (i / 6);
    if (row < count) {
      const uint8_t* line =
          p.cache + uint64_t(uint32_t(ld_shared_s32(slots + 4u * uint32_t(row)))) * 16u + (i % 6) * 128;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(line) : "memory");
    }
  }
  // Rope: rows' bytes [528, 656) -> box 8.
#pragma unroll
  for (int c = pt; c < K::kBlockN * 8; c += K::kProducerThreads) {
    const int row = c / 8, chunk = c % 8;
    const bool valid = row < count;
    const uint32_t off16 = valid ? uint32_t(ld_shared_s32(slots + 4u * uint32_t(row))) : 0u;
    const uint8_t* src = p.cache + uint64_t(off16) * 16u + K::kDsRopeAt + chunk * 16;
    const uint32_t dst =
        stage + uint32_t(K::kVBoxes * K::kBlockN * 128) + uint32_t(row) * 128u + uint32_t(chunk ^ (row % 8)) * 16u;
    sm80::cp_async_16(dst, valid ? src : p.cache, valid ? 16 : 0);
  }
  // Latents: lane's columns [16 lane, +16) are box lane / 4, pieces 2 (lane % 4) and +1.
  const uint32_t box = stage + uint32_t(lane / 4) * (K::kBlockN * 128);
  const uint32_t piece = uint32_t(lane % 4) * 2u;
#pragma unroll 1
  for (int b = 0; b < kRowsPerWarp; b += kBatch) {
    uint4 raw[kBatch];
    float scale[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int row = pw + 4 * (b + k);
      raw[k] = make_uint4(0, 0, 0, 0);
      scale[k] = 0.f;
      if (row < count) {
        const uint8_t* e = p.cache + uint64_t(uint32_t(ld_shared_s32(slots + 4u * uint32_t(row)))) * 16u;
        raw[k] = __ldg(reinterpret_cast<const uint4*>(e) + lane);
        scale[k] = __ldg(reinterpret_cast<const float*>(e + K::kDsScalesAt) + lane / 8);
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const uint32_t row = uint32_t(pw + 4 * (b + k));
      uint4 lo, hi;
      dequant16(raw[k], scale[k], lo, hi);
      st_shared_v4(box + row * 128u + ((piece ^ (row % 8u)) * 16u), lo);
      st_shared_v4(box + row * 128u + (((piece + 1u) ^ (row % 8u)) * 16u), hi);
    }
  }
}

// Consumers: Q rows = heads [h0, h0 + 64) of token t ([q_nope | q_pe], 576
// wide) into the 9 swizzled boxes; heads >= N are zero.
template <class K>
__device__ __forceinline__ void sparse_load_q(const SparseParams& p, int t, int h0, uint8_t* q_smem) {
  using T = __nv_bfloat16;
  constexpr int kChunks = K::kD / 8;
  const T* q = static_cast<const T*>(p.q);
  const bool vec = reinterpret_cast<uintptr_t>(q) % 16 == 0 && p.q_stride_t % 8 == 0 && p.q_stride_h % 8 == 0;
  for (int c = threadIdx.x; c < K::kBlockM * kChunks; c += K::kConsumerThreads) {
    const int row = c / kChunks, chunk = c % kChunks;
    const int h = h0 + row;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (h < p.N) {
      v = load_q_chunk(q + int64_t(t) * p.q_stride_t + int64_t(h) * p.q_stride_h + chunk * 8, vec);
    }
    *reinterpret_cast<uint4*>(q_smem + (chunk / 8) * K::kBoxBytes + swizzle128_offset(row, (chunk % 8) * 8)) = v;
  }
  fence_proxy_async_shared();
}

// Consumers: the two warpgroups' row sums added (share_row_sums),
// out = O / l with the sink factor, lse in natural log.
template <class K>
__device__ __forceinline__ void sparse_write_o(const SparseParams& p, int t, int h0, const SoftmaxState& st,
                                               const float (&o)[K::kColsPerWarpgroup / 2], int g, float* row_sum) {
  using T = __nv_bfloat16;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
  float sums[2];
  share_row_sums<K>(st, g, row_sum, sums);
  T* out_t = static_cast<T*>(p.out) + int64_t(t) * p.out_stride_t;
  const bool vec = reinterpret_cast<uintptr_t>(out_t) % 4 == 0 && p.out_stride_h % 2 == 0;
  const int col0 = g * K::kColsPerWarpgroup + 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int h = h0 + r0 + 8 * i;
    if (h >= p.N) continue;
    const float total = sums[i];
    // No key: output 0, LSE -inf. A NaN sum (a selected key held a NaN) passes through.
    const bool seen = !(total <= 0.f);
    const float lse = seen ? (st.m[i] + log2f(total)) * 0.69314718055994531f : -INFINITY;
    float inv = seen ? 1.f / total : 0.f;
    if (p.sink && seen) inv /= 1.f + expf(p.sink[h * p.sink_stride] - lse);
    T* out = out_t + int64_t(h) * p.out_stride_h + col0;
#pragma unroll
    for (int n = 0; n < K::kColsPerWarpgroup / 8; ++n) {
      const float a = o[4 * n + 2 * i] * inv, b = o[4 * n + 2 * i + 1] * inv;
      if (vec) {
        *reinterpret_cast<uint32_t*>(out + 8 * n) = sm80::pack2<T>(a, b);
      } else {
        out[8 * n] = __float2bfloat16_rn(a);
        out[8 * n + 1] = __float2bfloat16_rn(b);
      }
    }
    if (p.lse && g == 0 && lane % 4 == 0) p.lse[h * p.lse_stride_h + int64_t(t) * p.lse_stride_t] = lse;
  }
}

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1) sparse_mla_sm90_kernel(const __grid_constant__ SparseParams p) {
#ifdef LATTN_SM90_SPARSE_BODY
  // CTA = (head tile x, token y + 65535 z): head tiles fastest, so the CTAs
  // that gather the same rows run together and share them through L2.
  const int t = int(blockIdx.z * 65535u + blockIdx.y), h0 = int(blockIdx.x) * K::kBlockM;
  if (t >= p.T) return;  // the last z slice is partial (the whole CTA leaves)
  extern __shared__ uint8_t smem_raw[];
  const CtaSmem<K> smem(smem_raw);
  uint8_t *const q_smem = smem.q, *const kv_smem = smem.kv, *const p_smem = smem.p;
  float *const row_max = smem.row_max, *const row_sum = smem.row_sum;
  uint64_t *const full = smem.full, *const empty = smem.empty;
  const uint32_t slots_u32 = smem_u32(smem.base + K::kSlotsOffset);    // [kStages][kBlockN] row offsets
  const uint32_t counts_u32 = smem_u32(smem.base + K::kCountsOffset);  // [kStages]
  const int n_tiles = (p.topk + K::kBlockN - 1) / K::kBlockN;
  const int32_t* idx = p.indices + int64_t(t) * p.idx_stride;
  // full: every producer thread, after its copies; empty: every consumer warp, after its wgmmas.
  smem.init_ring(K::kProducerThreads, K::kConsumerThreads / 32);

  if (threadIdx.x >= K::kConsumerThreads) {
    // ---- producer warpgroup ----
    setmaxnreg_dec<K::kProducerRegs>();
    const bool lister = threadIdx.x < K::kConsumerThreads + 32;  // its warp 0
    const uint32_t stage0 = smem_u32(kv_smem);
    // The lister copies each tile's indices in one tile ahead: loaded at the
    // top of their own tile, their global-memory latency was a step of every
    // tile's chain (load, compact, gather, arrive), and the producer, not the
    // consumers, sets the pace (docs/perf.md). Through shared memory, since
    // registers holding them across a gather spilled (the bf16 producer has
    // 32). The buffer's address is an offset from slots_u32, not a register
    // of its own.
#define LATTN_NEXT_IDX (slots_u32 + uint32_t(K::kNextIdxOffset - K::kSlotsOffset))
    if (lister) {
      sparse_prefetch_indices(p, idx, 0, LATTN_NEXT_IDX);
      sm80::cp_async_commit();
      sm80::cp_async_wait<0>();
    }
    for (int it = 0; it < n_tiles; ++it) {
      const int s = it % K::kStages, round = it / K::kStages;
      const uint32_t slots = slots_u32 + uint32_t(s) * (K::kBlockN * 4), count_addr = counts_u32 + 4u * uint32_t(s);
      if (round > 0) mbarrier_wait(&empty[s], (round - 1) & 1);
      // The list of stage s was last read in tile it - 2, before the previous barrier.
      if (lister) {
        int32_t raw[2];
        sparse_read_indices(p, it, LATTN_NEXT_IDX, raw);  // copied during tile it - 1 (each lane its own words)
        sparse_compact(p, raw, slots, count_addr);
        if (it + 1 < n_tiles) sparse_prefetch_indices(p, idx, it + 1, LATTN_NEXT_IDX);  // lands during this gather
      }
#undef LATTN_NEXT_IDX
      named_barrier_sync(kBarProducer, K::kProducerThreads);
      const int count = ld_shared_s32(count_addr);
      const uint32_t stage = stage0 + uint32_t(s) * uint32_t(K::kKVTileBytes);
      if constexpr (K::kDsMla) {
        gather_ds_mla<K>(p, slots, count, stage);
      } else {
        gather_bf16<K>(p, slots, count, stage);
      }
      sm80::cp_async_commit();
      sm80::cp_async_wait<0>();
      fence_proxy_async_shared();  // this thread's stores and copies, before wgmma reads them
      mbarrier_arrive(&full[s]);
    }
    return;
  }

  // ---- consumer warpgroups ----
  setmaxnreg_inc<K::kConsumerRegs>();
  const int g = warpgroup_index();
  sparse_load_q<K>(p, t, h0, q_smem);
  named_barrier_sync(kBarConsumers, K::kConsumerThreads);

  const float scale_log2 = p.scale * 1.4426950408889634f;
  SoftmaxState st{{-INFINITY, -INFINITY}, {0.f, 0.f}};
  float o[K::kColsPerWarpgroup / 2];
#pragma unroll
  for (int i = 0; i < K::kColsPerWarpgroup / 2; ++i) o[i] = 0.f;

  for (int it = 0; it < n_tiles; ++it) {
    const int s = it % K::kStages, round = it / K::kStages;
    uint8_t* kv = kv_smem + s * K::kKVTileBytes;
    mbarrier_wait(&full[s], round & 1);
    const int count = ld_shared_s32(counts_u32 + 4u * uint32_t(s));
    const int key_limit[2] = {count, count};  // the tile's keys past its count are masked
    float sc[K::kKeysPerWarpgroup / 2];
    compute_qk<K>(q_smem, kv, g, sc);
    float alpha[2];
    softmax_tile<K>(sc, st, 0, count < K::kBlockN, key_limit, scale_log2, g, row_max, p_smem, alpha);
    named_barrier_sync(kBarP, K::kConsumerThreads);  // both halves of P written (and fenced)
    compute_pv<K>(p_smem, kv, g, o, alpha);
    mbarrier_arrive_per_warp(&empty[s]);  // this warp's wgmmas have read the stage
  }
  sparse_write_o<K>(p, t, h0, st, o, g, row_sum);
#endif
}

// Launches the kernel for one cache format (sparse_instance_{bf16,fp8}.cu).
template <bool kDsMla, int kFp8Batch>
void launch_sparse_mla_sm90(const SparseParams& p, cudaStream_t stream);

}  // namespace lattn::cuda::sm90
