// src/cuda/sm90/decode/ring32_kernel.cuh — the "ring32" schedule of the
// Hopper decode kernel (ring32_traits.h has the shape; docs/hopper.md, "The
// ring32 schedule"), and the copy probes (benchmark diagnostics).
//
// Grid and pieces as the serial kernel (decode_kernel.cuh): CTA (mt, part)
// computes packed rows [64 mt, +64) of every (request, tile range) piece of
// `part`; the plan's 64-key tiles are walked as 32-key compute tiles, the
// empty second half of a request's last plan tile skipped.
//
// sm_90a only: the bodies compile to nothing for other targets.
#pragma once

#include <climits>

#include "cuda/sm90/common/cta_smem.cuh"
#include "cuda/sm90/decode/decode_epilogue.cuh"
#include "cuda/sm90/decode/decode_kernel.cuh"
#include "cuda/sm90/decode/ring32_traits.h"

namespace lattn::cuda::sm90 {

// The compute tiles [first, last) of a piece given in the plan's tiles
// [tile_begin, tile_end): kBlockN / kTileKeys per plan tile, none past the keys.
template <class K>
__device__ __forceinline__ int2 ring32_tiles(const PieceView& pv, int tile_begin, int tile_end) {
  constexpr int kPer = K::kBlockN / K::kTileKeys;
  return make_int2(tile_begin * kPer, min(tile_end * kPer, (pv.seq_len + K::kTileKeys - 1) / K::kTileKeys));
}

// Producer (one thread): compute tile `tile` (keys [kTileKeys tile, +kTileKeys),
// inside one page: the page size is a multiple of 64) into `dst`, boxes of
// [kTileKeys keys][64 columns]; with `half`, only the boxes of this CTA's
// parity (copy probes).
template <class K, bool kHalf = false>
__device__ __forceinline__ void ring32_load_tile(const CUtensorMap* cache_map, const DecodeParams& p,
                                                 const PieceView& pv, int tile, uint8_t* dst, uint64_t* full,
                                                 CacheHint hint) {
  const int key0 = tile * K::kTileKeys;
  const int page =
      int(checked_block_id(pv.table, key0 / p.block_size, p.table_width, p.num_blocks, p.index_violations));
  const int row = key0 % p.block_size;
  const int parity = blockIdx.x % 2;
  const uint32_t boxes = kHalf ? (parity == 0 ? (K::kBoxes + 1) / 2 : K::kBoxes / 2) : K::kBoxes;
  mbarrier_arrive_expect_tx(full, boxes * uint32_t(K::kStageBoxBytes));
#pragma unroll
  for (int c = 0; c < K::kBoxes; ++c) {
    if (kHalf && c % 2 != parity) continue;
    tma_load_3d(dst + c * K::kStageBoxBytes, cache_map, full, c * K::kBoxCols, row, page, hint);
  }
}

// The producer warpgroup's loop (one thread issues; the rest return).
template <class K, bool kHalf = false>
__device__ __forceinline__ void ring32_producer(const DecodeParams& p, const CUtensorMap* cache_map, int part,
                                                uint8_t* kv_smem, uint64_t* full, uint64_t* empty, CacheHint hint) {
  if (threadIdx.x != K::kConsumerThreads) return;
  tma_prefetch_descriptor(cache_map);
  int it = 0;  // tiles issued so far: stage it % kStages, round it / kStages
  for_each_piece<K>(p, part, [&](const PieceView& pv, int tile_begin, int tile_end, int) {
    const int2 range = ring32_tiles<K>(pv, tile_begin, tile_end);
    for (int tile = range.x; tile < range.y; ++tile, ++it) {
      const int s = it % K::kStages, round = it / K::kStages;
      if (round > 0) mbarrier_wait(&empty[s], (round - 1) & 1);
      ring32_load_tile<K, kHalf>(cache_map, p, pv, tile, kv_smem + s * K::kKVTileBytes, &full[s], hint);
    }
  });
}

// Consumers (256 threads): Q columns [0, 512) of rows [row0, +64) into 8
// swizzled boxes (zero past the request's rows), then fence.proxy.async.
// And warpgroup g's register steps of S: Q columns [288g + 224, +64) (g = 0:
// q_nope, g = 1: q_pe), as wgmma RS A fragments (4 k16 steps x 4 registers).
template <class K>
__device__ __forceinline__ void ring32_load_q(const DecodeParams& p, const PieceView& pv, uint8_t* q_smem, int g,
                                              uint32_t (&qa)[K::kQpeSteps][4]) {
  using T = typename K::T;
  constexpr int kChunks = K::kL / 8;  // 16-byte chunks per row of q_nope (64)
  for (int c = threadIdx.x; c < K::kBlockM * kChunks; c += K::kConsumerThreads) {
    const int row = c / kChunks, col = (c % kChunks) * 8;
    const int gr = pv.row0 + row;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (gr < pv.rows) {
      const int j = gr / p.num_heads, h = gr % p.num_heads;
      const T* src = static_cast<const T*>(p.q_nope) + (pv.q0 + j) * p.q_nope_stride_t + h * p.q_nope_stride_h + col;
      if (p.q_vec) {
        v = *reinterpret_cast<const uint4*>(src);
      } else {
        T e[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) e[i] = src[i];
        memcpy(&v, e, 16);
      }
    }
    *reinterpret_cast<uint4*>(q_smem + (col / K::kBoxCols) * K::kBoxBytes + swizzle128_offset(row, col % K::kBoxCols)) =
        v;
  }
  // A fragment of k16 step j: a0 = (row r, k 2(l%4) + {0,1}), a1 = (row r + 8,
  // same k), a2 / a3 = the same at k + 8 (wgmma.cuh).
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int col0 = g * (K::kStepsPerWarpgroup * 16) + (K::kStepsPerWarpgroup - K::kQpeSteps) * 16;  // 224 or 512
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = pv.row0 + 16 * w + lane / 4 + 8 * i;
    const T* src = nullptr;
    if (gr < pv.rows) {
      const int j = gr / p.num_heads, h = gr % p.num_heads;
      src = col0 < K::kL ? static_cast<const T*>(p.q_nope) + (pv.q0 + j) * p.q_nope_stride_t + h * p.q_nope_stride_h + col0
                         : static_cast<const T*>(p.q_pe) + (pv.q0 + j) * p.q_pe_stride_t + h * p.q_pe_stride_h +
                               (col0 - K::kL);
    }
#pragma unroll
    for (int step = 0; step < K::kQpeSteps; ++step) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int k = 16 * step + 8 * half + 2 * (lane % 4);
        uint32_t v = 0;
        if (src) {
          T e[2] = {src[k], src[k + 1]};
          memcpy(&v, e, 4);
        }
        qa[step][2 * half + i] = v;
      }
    }
  }
  fence_proxy_async_shared();
}

// Warpgroup g's partial S[64 rows][32 keys] over its k16 steps [18g, 18g + 18):
// the first 14 with Q from shared memory, the last 4 with Q from registers.
template <class K>
__device__ __forceinline__ void ring32_qk(const uint8_t* q_smem, const uint8_t* kv, int g,
                                          const uint32_t (&qa)[K::kQpeSteps][4], float (&s)[K::kTileKeys / 2]) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  constexpr int kSmemSteps = K::kStepsPerWarpgroup - K::kQpeSteps;
  const int first = g * K::kStepsPerWarpgroup;
  warpgroup_arrive();
#pragma unroll
  for (int i = 0; i < kSmemSteps; ++i) {
    const int step = first + i, box = step / 4, kk = step % 4;
    const uint64_t da = make_desc_kmajor_sw128(q_smem + box * K::kBoxBytes + kk * 32);
    const uint64_t db = make_desc_kmajor_sw128(kv + box * K::kStageBoxBytes + kk * 32);
    wgmma_ss<K::kTileKeys, kBf16>(s, da, db, i != 0);
  }
#pragma unroll
  for (int j = 0; j < K::kQpeSteps; ++j) {
    const int step = first + kSmemSteps + j, box = step / 4, kk = step % 4;
    const uint64_t db = make_desc_kmajor_sw128(kv + box * K::kStageBoxBytes + kk * 32);
    wgmma_rs<K::kTileKeys, kBf16>(s, qa[j], db, 1);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(s);
}

// The rare tiles (uniform over the CTA): keys past seq_len (their V rows are
// zeroed: garbage or NaN poison must not reach O through 0 * NaN), and keys
// only some rows may see (s_q > 1: their non-finite V elements are zeroed and
// the first such key returned, so rows that see it are made NaN, as the math
// makes them; docs/mla.md "NaN and inf"). Called by all 256 consumer threads
// after both warpgroups' S of the tile (the exchange barrier); ends with a
// barrier, so P V may read the cleaned stage.
template <class K>
__device__ __forceinline__ int ring32_fix_tile(uint8_t* kv, int key0, int seq_len, int mask_from, bool sanitize,
                                               int* bad_key) {
  using T = typename K::T;
  const int valid = min(K::kTileKeys, seq_len - key0);
  for (int i = threadIdx.x; i < (K::kTileKeys - valid) * (K::kL / 8); i += K::kConsumerThreads) {
    const int row = valid + i / (K::kL / 8), chunk = i % (K::kL / 8);
    *reinterpret_cast<uint4*>(kv + (chunk / 8) * K::kStageBoxBytes + row * 128 + (chunk % 8) * 16) =
        make_uint4(0, 0, 0, 0);
  }
  if (sanitize) {
    if (threadIdx.x == 0) *bad_key = INT_MAX;
    named_barrier_sync(kBarConsumers, K::kConsumerThreads);
    const int k_lo = max(key0, mask_from), k_hi = min(key0 + K::kTileKeys, seq_len);
    for (int idx = threadIdx.x; idx < (k_hi - k_lo) * K::kL; idx += K::kConsumerThreads) {
      const int key = k_lo + idx / K::kL, col = idx % K::kL;
      T* x = reinterpret_cast<T*>(kv + (col / K::kBoxCols) * K::kStageBoxBytes +
                                  swizzle128_offset(key - key0, col % K::kBoxCols));
      if (!isfinite(static_cast<float>(*x))) {
        *x = T(0.f);
        atomicMin(bad_key, key);
      }
    }
  }
  fence_proxy_async_shared();
  named_barrier_sync(kBarConsumers, K::kConsumerThreads);
  return sanitize ? *bad_key : INT_MAX;
}

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1)
    mla_decode_sm90_ring32_kernel(const __grid_constant__ DecodeParams p, const __grid_constant__ CUtensorMap cache_map,
                                  CacheHint kv_hint) {
#ifdef LATTN_SM90_DECODE_BODY
  using T = typename K::T;
  extern __shared__ uint8_t smem_raw[];
  const CtaSmem<K> smem(smem_raw);
  uint8_t *const q_smem = smem.q, *const kv_smem = smem.kv;
  uint8_t* const xchg = smem.template at<uint8_t>(K::kXchgOffset);
  uint64_t *const full = smem.full, *const empty = smem.empty;
  int* bad_key = smem.template at<int>(K::kBadKeyOffset);
  const int part = blockIdx.y;
  // full: the producer's arrive.expect_tx; empty: every consumer thread, after its P V.
  smem.init_ring(1, K::kConsumerThreads);

  if (threadIdx.x >= K::kConsumerThreads) {
    setmaxnreg_dec<K::kProducerRegs>();
    ring32_producer<K>(p, &cache_map, part, kv_smem, full, empty, kv_hint);
    return;
  }

  // ---- consumer warpgroups ----
  setmaxnreg_inc<K::kConsumerRegs>();
  const int g = threadIdx.x / 128, t = warpgroup_thread();
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  // This thread's float4 slots of the exchange: its own partial, the other's.
  float4* const mine = reinterpret_cast<float4*>(xchg) + g * 4 * 128 + t;
  const float4* const other = reinterpret_cast<const float4*>(xchg) + (1 - g) * 4 * 128 + t;
  int it = 0;  // tiles consumed so far
  for_each_piece<K>(p, part, [&](const PieceView& pv, int tile_begin, int tile_end, int slot) {
    // Both warpgroups' wgmmas of the previous piece are complete before Q is overwritten.
    named_barrier_sync(kBarConsumers, K::kConsumerThreads);
    uint32_t qa[K::kQpeSteps][4];
    ring32_load_q<K>(p, pv, q_smem, g, qa);
    named_barrier_sync(kBarConsumers, K::kConsumerThreads);

    int key_limit[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int gr = pv.row0 + 16 * w + lane / 4 + 8 * i;
      key_limit[i] = gr < pv.rows ? pv.seq_len - pv.s_q + gr / p.num_heads + 1 : pv.seq_len;
    }
    const int mask_from = pv.seq_len - pv.s_q + 1;  // tiles reaching past it need masking

    SoftmaxState st{{-INFINITY, -INFINITY}, {0.f, 0.f}};
    float o[K::kColsPerWarpgroup / 2];
#pragma unroll
    for (int i = 0; i < K::kColsPerWarpgroup / 2; ++i) o[i] = 0.f;

    const int2 range = ring32_tiles<K>(pv, tile_begin, tile_end);
    for (int tile = range.x; tile < range.y; ++tile, ++it) {
      const int s = it % K::kStages, round = it / K::kStages;
      uint8_t* kv = kv_smem + s * K::kKVTileBytes;
      mbarrier_wait(&full[s], round & 1);
      const int key0 = tile * K::kTileKeys;

      float sc[K::kTileKeys / 2];
      ring32_qk<K>(q_smem, kv, g, qa, sc);
      // Exchange the partials: p0 + p1 in both warpgroups (the same bits).
#pragma unroll
      for (int q = 0; q < 4; ++q) mine[q * 128] = make_float4(sc[4 * q], sc[4 * q + 1], sc[4 * q + 2], sc[4 * q + 3]);
      named_barrier_sync(kBarRowMax, K::kConsumerThreads);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 v = other[q * 128];
        sc[4 * q] += v.x;
        sc[4 * q + 1] += v.y;
        sc[4 * q + 2] += v.z;
        sc[4 * q + 3] += v.w;
      }
      named_barrier_sync(kBarP, K::kConsumerThreads);  // both read: the next tile may overwrite

      // Online softmax over the whole tile (the same in both warpgroups).
      const bool mask = key0 + K::kTileKeys > mask_from;
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < K::kTileKeys / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * j + 2 * (lane % 4) + (e % 2);
          float x = sc[4 * j + e] * p.scale_log2;
          if (mask && key >= key_limit[e / 2]) x = -INFINITY;
          sc[4 * j + e] = x;
          mx[e / 2] = fmaxf(mx[e / 2], x);
        }
      }
      float alpha[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        const float m_new = fmaxf(st.m[i], mx[i]);
        // A row with no key yet keeps m = -inf; subtract 0 then (exp2(-inf) = 0).
        const float base = m_new == -INFINITY ? 0.f : m_new;
        alpha[i] = exp2f(st.m[i] - base);
        st.m[i] = m_new;
        mx[i] = base;
      }
      float sum[2] = {0.f, 0.f};
#pragma unroll
      for (int e = 0; e < K::kTileKeys / 2; ++e) {
        sc[e] = exp2f(sc[e] - mx[(e / 2) % 2]);
        sum[(e / 2) % 2] += sc[e];
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) st.l[i] = st.l[i] * alpha[i] + sum[i];
      uint32_t pa[K::kTileKeys / 16][4];
#pragma unroll
      for (int kk = 0; kk < K::kTileKeys / 16; ++kk) {
#pragma unroll
        for (int r = 0; r < 4; ++r) pa[kk][r] = sm80::pack2<T>(sc[8 * kk + 2 * r], sc[8 * kk + 2 * r + 1]);
      }

      const bool sanitize = mask_from < pv.seq_len && key0 + K::kTileKeys > mask_from;
      if (sanitize || key0 + K::kTileKeys > pv.seq_len) {
        const int first_bad = ring32_fix_tile<K>(kv, key0, pv.seq_len, mask_from, sanitize, bad_key);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (first_bad < key_limit[i]) st.l[i] = NAN;  // this row sees a non-finite value: NaN, as the math
        }
      }

      // O = alpha O + P V over the tile's keys (RS: P from registers).
#pragma unroll
      for (int j = 0; j < K::kColsPerWarpgroup / 8; ++j) {
        o[4 * j] *= alpha[0];
        o[4 * j + 1] *= alpha[0];
        o[4 * j + 2] *= alpha[1];
        o[4 * j + 3] *= alpha[1];
      }
      constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
      constexpr int kVBoxesPerWg = K::kColsPerWarpgroup / K::kBoxCols;
      warpgroup_arrive();
#pragma unroll
      for (int kk = 0; kk < K::kTileKeys / 16; ++kk) {
        const uint64_t db = make_desc_mnmajor_sw128(kv + g * kVBoxesPerWg * K::kStageBoxBytes + kk * 16 * 128,
                                                    uint32_t(K::kStageBoxBytes));
        wgmma_rs<K::kColsPerWarpgroup, kBf16, 1>(o, pa[kk], db, 1);
      }
      wgmma_commit_group();
      wgmma_wait_group<0>();
      fence_operands(o);
      mbarrier_arrive(&empty[s]);  // this thread's wgmmas have read the stage
    }
    // Both warpgroups hold the same row sums (the same P); write_o adds the
    // two warpgroups' sums, so warpgroup 1 adds zero (exact, NaN included).
    if (g == 1) st.l[0] = st.l[1] = 0.f;
    write_o<K>(p, pv, st, o, slot, g, smem.row_sum);
  });
#endif
}

// Copy probe (diagnostic, wrong results): the ring of K with no math.
template <class K>
__global__ void __launch_bounds__(K::kThreads, 1)
    mla_decode_sm90_copy_probe_kernel(const __grid_constant__ DecodeParams p,
                                      const __grid_constant__ CUtensorMap cache_map, CacheHint kv_hint) {
#ifdef LATTN_SM90_DECODE_BODY
  extern __shared__ uint8_t smem_raw[];
  const CtaSmem<K> smem(smem_raw);
  uint64_t *const full = smem.full, *const empty = smem.empty;
  const int part = blockIdx.y;
  smem.init_ring(1, K::kConsumerThreads);
  if (threadIdx.x >= K::kConsumerThreads) {
    setmaxnreg_dec<K::kProducerRegs>();
    ring32_producer<K, K::kHalf>(p, &cache_map, part, smem.kv, full, empty, kv_hint);
    return;
  }
  setmaxnreg_inc<K::kConsumerRegs>();
  int it = 0;
  for_each_piece<K>(p, part, [&](const PieceView& pv, int tile_begin, int tile_end, int) {
    const int2 range = ring32_tiles<K>(pv, tile_begin, tile_end);
    for (int tile = range.x; tile < range.y; ++tile, ++it) {
      const int s = it % K::kStages, round = it / K::kStages;
      mbarrier_wait(&full[s], round & 1);
      mbarrier_arrive(&empty[s]);
    }
  });
#endif
}

}  // namespace lattn::cuda::sm90
