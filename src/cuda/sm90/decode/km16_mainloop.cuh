// src/cuda/sm90/decode/km16_mainloop.cuh — the steps of the key-major
// decode kernel for a 16-bit cache (km16_traits.h has the shape and why):
// the consumers' Q load, S^T = K Q^T and O^T += V^T P^T with every operand in
// shared memory, and the cleaning of V rows that P = 0 must not meet. The
// softmax is the fp8 kernel's (fp8_mainloop.cuh, P in tile key order here).
//
// Accumulators (wgmma m64n16, f32): thread (warp w, lane: gid = l / 4,
// t = l % 4) holds d[4jn + 2h + e] = M row 16w + gid + 8h, N column
// 8jn + 2t + e. For S^T the M rows are the tile's keys and N the packed rows;
// for O^T block mb the M rows are latent columns 64mb + 16w + gid + 8h.
#pragma once

#include <cuda.h>

#include <climits>
#include <cmath>
#include <type_traits>

#include "cuda/sm90/common/mbarrier.cuh"
#include "cuda/sm90/common/tma.cuh"
#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/common/wgmma.cuh"
#include "cuda/sm90/decode/km16_traits.h"
#include "cuda/smxx/decode_params.h"
#include "cuda/smxx/decode_pieces.cuh"  // DecodeRequestView

namespace lattn::cuda::sm90 {

// Consumers (256 threads): the CTA's 16 rows of [q_nope | q_pe] as the B
// operand of S^T, 9 boxes of [16 rows][64] with the 128-byte swizzle; rows
// past the request are 0. Ends with fence.proxy.async (the caller's barrier
// makes the stores visible to the wgmmas).
template <class K>
__device__ __forceinline__ void km16_load_q(const DecodeParams& p, const DecodeRequestView& pv, uint8_t* q_smem) {
  using T = typename K::T;
  constexpr int kChunks8 = K::kD / 8;  // 16-byte chunks per row (72)
  for (int c = threadIdx.x; c < K::kRows * kChunks8; c += K::kConsumerThreads) {
    const int row = c / kChunks8, col = (c % kChunks8) * 8;
    const int gr = pv.row0 + row;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (gr < pv.rows) {
      const T* src = decode_q_src<T, K::kL>(p, pv, gr, col);
      if (p.q_vec) {
        v = *reinterpret_cast<const uint4*>(src);
      } else {
        T e[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) e[i] = src[i];
        memcpy(&v, e, 16);
      }
    }
    *reinterpret_cast<uint4*>(q_smem + (col / K::kChunkCols) * K::kQBoxBytes +
                              swizzle128_offset(row, col % K::kChunkCols)) = v;
  }
  fence_proxy_async_shared();
}

// S^T [64 keys][16 rows] of one tile: 36 wgmma m64n16k16, A = K from the
// stage (K-major), B = Q (K-major), one commit group.
template <class K>
__device__ __forceinline__ void km16_compute_qk(const uint8_t* q_smem, const uint8_t* kv, float (&s)[8]) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  const uint64_t k_desc = make_desc_kmajor_sw128(kv), q_desc = make_desc_kmajor_sw128(q_smem);
  warpgroup_arrive();
#pragma unroll
  for (int c = 0; c < K::kChunks; ++c) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      wgmma_ss<16, kBf16>(s, desc_advance(k_desc, c * K::kChunkBytes + 32 * j),
                          desc_advance(q_desc, c * K::kQBoxBytes + 32 * j), (c | j) != 0);
    }
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(s);
}

// The V rows (columns 0..511) of one tile that P V must not read as they
// are (warpgroup g's 128 threads, after its S^T has read the tile): keys at
// or past seq_len are zeroed (the page's tail: garbage or NaN poison), and
// in keys [k_lo, seq_len) — the last s_q - 1 keys, which some rows may not
// see — non-finite values are zeroed and the first such key recorded in
// *bad_key (atomicMin), so that the rows that may see it are made NaN, as
// the math makes them (docs/mla.md, "NaN and inf"). Ends with
// fence.proxy.async; the caller's barrier orders it before the P V wgmmas.
template <class K>
__device__ __forceinline__ void km16_clean_v(uint8_t* kv, int key0, int k_lo, int seq_len, int* bad_key) {
  using T = typename K::T;
  const int tid = warpgroup_thread();
  const int valid = min(max(seq_len - key0, 0), K::kBlockN);  // keys of the tile inside the sequence
  // Tail: rows [valid, 64), 8 V boxes of 8 16-byte chunks each.
  for (int i = tid; i < (K::kBlockN - valid) * K::kVChunks * 8; i += 128) {
    const int row = valid + i / (K::kVChunks * 8), rest = i % (K::kVChunks * 8);
    *reinterpret_cast<uint4*>(kv + (rest / 8) * K::kChunkBytes + row * 128 + (rest % 8) * 16) = make_uint4(0, 0, 0, 0);
  }
  const int lo = max(k_lo - key0, 0);
  for (int i = tid; i < (valid - lo) * K::kL; i += 128) {
    const int key = lo + i / K::kL, col = i % K::kL;
    T* x =
        reinterpret_cast<T*>(kv + (col / K::kChunkCols) * K::kChunkBytes + swizzle128_offset(key, col % K::kChunkCols));
    if (!isfinite(static_cast<float>(*x))) {
      *x = T(0.f);
      atomicMin(bad_key, key0 + key);
    }
  }
  fence_proxy_async_shared();
}

// O^T (o[mb]: latent columns [64mb, +64)) = alpha * O^T + V^T P^T over the
// tile's 64 keys: 32 wgmma m64n16k16, A = V^T (the stage's V boxes read
// MN-major: 64 columns x 16 keys per k-step, +2 KB per step), B = P^T.
template <class K>
__device__ __forceinline__ void km16_compute_pv(const uint8_t* p_box, const uint8_t* kv, float (&o)[K::kOBlocks][8],
                                                const float (&alpha)[4]) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  // Skipped where it changes nothing (x * 1 = x): a tile raises no row's
  // maximum in most tiles of a long walk, and the 64 multiplies sit in front
  // of the tile's first P V wgmma.
  if (!__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f && alpha[2] == 1.f && alpha[3] == 1.f)) {
#pragma unroll
    for (int mb = 0; mb < K::kOBlocks; ++mb) {
#pragma unroll
      for (int r = 0; r < 8; ++r) o[mb][r] *= alpha[2 * (r / 4) + (r % 2)];
    }
  }
#pragma unroll
  for (int mb = 0; mb < K::kOBlocks; ++mb) fence_operands(o[mb]);
  const uint64_t v_desc = make_desc_mnmajor_sw128(kv, K::kChunkBytes), p_desc = make_desc_kmajor_sw128(p_box);
  warpgroup_arrive();
#pragma unroll
  for (int ks = 0; ks < K::kBlockN / 16; ++ks) {
#pragma unroll
    for (int mb = 0; mb < K::kOBlocks; ++mb) {
      wgmma_ss<16, kBf16, 1, 0>(o[mb], desc_advance(v_desc, mb * K::kChunkBytes + ks * 2048),
                                desc_advance(p_desc, 32 * ks), 1);
    }
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
#pragma unroll
  for (int mb = 0; mb < K::kOBlocks; ++mb) fence_operands(o[mb]);
}

}  // namespace lattn::cuda::sm90
