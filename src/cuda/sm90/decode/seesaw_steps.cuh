// src/cuda/sm90/decode/seesaw_steps.cuh — the steps of the seesaw decode
// kernel (seesaw_traits.h has the shape, seesaw_kernel.cuh the schedule):
// the producer's checked paged tile copy, S = Q K^T for a whole 64-key tile,
// the score mask and row max, the exponentials, P as wgmma A fragments or as
// a swizzled shared-memory box, and the two forms of O += P V.
//
// Accumulator layout of S (m64n64k16, f32, 32 registers): thread (warp w,
// lane l) holds rows r0 = 16 w + l/4 and r0 + 8; s[4j + 0..1] are row r0,
// keys 8j + 2(l%4) + {0,1}, s[4j + 2..3] the same keys of row r0 + 8.
#pragma once

#include <cuda.h>

#include <climits>
#include <cmath>

#include "cuda/common/index_check.cuh"
#include "cuda/sm80/mma.cuh"  // pack2
#include "cuda/sm90/common/mbarrier.cuh"
#include "cuda/sm90/common/tma.cuh"
#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/common/wgmma.cuh"
#include "cuda/sm90/decode/decode_mainloop.cuh"  // PieceView, load_q, SoftmaxState
#include "cuda/sm90/decode/seesaw_traits.h"

namespace lattn::cuda::sm90 {

// Producer: the page and first row of KV tile `tile` of the request (keys
// [64 tile, +64), inside one page since the page size is a multiple of 64).
// The block id is checked against the table's width and the cache
// (index_check.cuh): a bad one is recorded and the copy is aimed at page -1,
// which the copy engine fills with zeros (out of the tensor map's bounds) —
// nothing outside the cache is read, and the transaction byte count is the
// same.
struct TileSource {
  int page, row;
};
__device__ __forceinline__ TileSource seesaw_tile_source(const DecodeParams& p, const PieceView& pv, int tile,
                                                         int block_n) {
  const int key0 = tile * block_n;
  const int page =
      int(checked_block_id(pv.table, key0 / p.block_size, p.table_width, p.num_blocks, p.index_violations));
  return {page, key0 % p.block_size};
}

// Producer (one thread): the boxes of release group `group` of a tile in
// stage `stage` ([64 keys][64 columns] each, box c at dst + 8 KB c),
// completing on full[c]. Addresses are 32-bit .shared::cta ones: the
// producer runs with 24 registers.
template <class K>
__device__ __forceinline__ void seesaw_load_group(const CUtensorMap* cache_map, TileSource src, int stage, int group,
                                                  uint32_t dst, uint32_t full, CacheHint hint) {
#pragma unroll
  for (int c = 0; c < K::kBoxes; ++c) {
    if (K::box_group(stage, c) != group) continue;
    mbarrier_arrive_expect_tx(full + 8 * c, K::kBoxTxBytes);
    tma_load_3d(dst + c * K::kBlockN * 128, cache_map, full + 8 * c, c * K::kBoxCols, src.row, src.page, hint);
  }
}

// Keys [k_lo, k_hi) of a tile (key0 = its first key) are masked for some rows
// of the CTA (s_q > 1: a query token does not see the tokens after it). A
// masked key must contribute nothing (docs/mla.md, "NaN and inf"), but P = 0
// times a NaN or inf value is NaN in P V, so the non-finite V elements
// (columns 0..511) of those keys are zeroed after the warpgroup's S has read
// the tile and before any P V reads it. Returns the first key that had one
// (INT_MAX if none): the caller makes the rows that may see it NaN, as the
// math does. Called by the 128 threads of the warpgroup that owns the tile
// (the other warpgroup reads it only after a later cross-warpgroup barrier);
// `flag` is the warpgroup's own int, `wg_barrier` its own named barrier.
template <class K>
__device__ __forceinline__ int seesaw_sanitize(uint8_t* kv, int key0, int k_lo, int k_hi, int* flag,
                                               int wg_barrier) {
  using T = typename K::T;
  const int t = warpgroup_thread();
  named_barrier_sync(wg_barrier, 128);  // the last read of the flag is done
  if (t == 0) *flag = INT_MAX;
  named_barrier_sync(wg_barrier, 128);
  for (int idx = t; idx < (k_hi - k_lo) * K::kL; idx += 128) {
    const int key = k_lo + idx / K::kL, col = idx % K::kL;
    T* x = reinterpret_cast<T*>(kv + (col / K::kBoxCols) * K::kBlockN * 128 +
                                swizzle128_offset(key - key0, col % K::kBoxCols));
    if (!isfinite(static_cast<float>(*x))) {
      *x = T(0.f);
      atomicMin(flag, key);
    }
  }
  fence_proxy_async_shared();
  named_barrier_sync(wg_barrier, 128);
  return *flag;
}

// S[64 rows][64 keys] = Q . K^T over 576 columns: 36 wgmma m64n64k16 (Q and
// K K-major from shared memory), box c issued as soon as it has landed.
template <class K>
__device__ __forceinline__ void seesaw_qk(const uint8_t* q_smem, const uint8_t* kv, uint64_t* full, uint32_t parity,
                                          float (&s)[K::kBlockN / 2]) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
#pragma unroll
  for (int c = 0; c < K::kBoxes; ++c) {
    mbarrier_wait(&full[c], parity);
    warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t da = make_desc_kmajor_sw128(q_smem + c * K::kBoxBytes + kk * 32);
      const uint64_t db = make_desc_kmajor_sw128(kv + c * K::kBlockN * 128 + kk * 32);
      wgmma_ss<K::kBlockN, kBf16>(s, da, db, (c | kk) != 0);
    }
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(s);
}

// Zeroes the V rows (columns 0..511) of keys [valid, 64) of a tile, by the
// 128 threads of the calling warpgroup: whatever the page holds past the
// sequence (NaN poison included) must not reach O through 0 * NaN. Called
// after the warpgroup's S (which masks those keys) has completed; the fence
// and the warpgroup barrier order the stores before any wgmma reads them
// (the other warpgroup reads them only after a later cross-warpgroup barrier).
template <class K>
__device__ __forceinline__ void seesaw_zero_tail(uint8_t* kv, int valid, int wg_barrier) {
  const int rows = K::kBlockN - valid;
  const int t = warpgroup_thread();
  for (int i = t; i < rows * K::kVBoxes * 8; i += 128) {
    const int row = valid + i / (K::kVBoxes * 8), rest = i % (K::kVBoxes * 8);
    const int box = rest / 8, chunk = rest % 8;
    *reinterpret_cast<uint4*>(kv + box * K::kBlockN * 128 + row * 128 + chunk * 16) = make_uint4(0, 0, 0, 0);
  }
  fence_proxy_async_shared();
  named_barrier_sync(wg_barrier, 128);
}

// Scores in log2 units (scale folded in), keys at or past each row's limit
// masked to -inf; returns the tile's max of this thread's two rows (reduced
// over the 4 threads that share a row).
template <class K>
__device__ __forceinline__ void seesaw_scores(float (&s)[K::kBlockN / 2], int key0, bool mask,
                                              const int (&key_limit)[2], float scale_log2, float (&mx)[2]) {
  const int lane = threadIdx.x % 32;
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int j = 0; j < K::kBlockN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + 8 * j + 2 * (lane % 4) + (e % 2);
      float x = s[4 * j + e] * scale_log2;
      if (mask && key >= key_limit[e / 2]) x = -INFINITY;
      s[4 * j + e] = x;
      mx[e / 2] = fmaxf(mx[e / 2], x);
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
  }
}

// The subtrahend of the exponentials for a row max m: a row with no key yet
// keeps m = -inf and subtracts 0 (exp2(-inf) = 0, never inf - inf).
__device__ __forceinline__ float softmax_base(float m) { return m == -INFINITY ? 0.f : m; }

// exp2(m_from - base(m_to)): the factor taking values relative to m_from to
// m_to >= m_from; 0 when m_from = -inf (those values are 0 anyway, and the
// factor must not be 2^(huge)).
__device__ __forceinline__ float softmax_rescale(float m_from, float m_to) {
  return m_from == -INFINITY ? 0.f : exp2f(m_from - softmax_base(m_to));
}

// s := exp2(s - base(m)) per row; sum = this thread's partial row sums.
template <class K>
__device__ __forceinline__ void seesaw_exp(float (&s)[K::kBlockN / 2], const float (&m)[2], float (&sum)[2]) {
  const float base[2] = {softmax_base(m[0]), softmax_base(m[1])};
  sum[0] = sum[1] = 0.f;
#pragma unroll
  for (int i = 0; i < K::kBlockN / 2; ++i) {
    const int r = (i % 4) / 2;
    s[i] = exp2f(s[i] - base[r]);
    sum[r] += s[i];
  }
}

// P (16-bit) as the A fragments of 4 k16 steps of an RS wgmma (wgmma.cuh).
template <class K>
__device__ __forceinline__ void seesaw_pack_p(const float (&s)[K::kBlockN / 2], uint32_t (&a)[K::kBlockN / 16][4]) {
  using T = typename K::T;
#pragma unroll
  for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) a[kk][r] = sm80::pack2<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  }
}

// f * P (16-bit, f per row) into a swizzled [64 rows][64 keys] box, then
// fence.proxy.async: the box is a K-major A operand for the other warpgroup's
// SS wgmma after the caller's barrier.
template <class K>
__device__ __forceinline__ void seesaw_store_p(const float (&s)[K::kBlockN / 2], const float (&f)[2], uint8_t* box) {
  using T = typename K::T;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
#pragma unroll
  for (int j = 0; j < K::kBlockN / 8; ++j) {
    const int key = 8 * j + 2 * (lane % 4);
    *reinterpret_cast<uint32_t*>(box + swizzle128_offset(r0, key)) = sm80::pack2<T>(s[4 * j] * f[0], s[4 * j + 1] * f[0]);
    *reinterpret_cast<uint32_t*>(box + swizzle128_offset(r0 + 8, key)) =
        sm80::pack2<T>(s[4 * j + 2] * f[1], s[4 * j + 3] * f[1]);
  }
  fence_proxy_async_shared();
}

// O rows r0, r0 + 8 times f[0], f[1].
template <class K>
__device__ __forceinline__ void seesaw_scale_o(float (&o)[K::kColsPerWarpgroup / 2], const float (&f)[2]) {
#pragma unroll
  for (int j = 0; j < K::kColsPerWarpgroup / 8; ++j) {
    o[4 * j] *= f[0];
    o[4 * j + 1] *= f[0];
    o[4 * j + 2] *= f[1];
    o[4 * j + 3] *= f[1];
  }
}

// O[64][256] of warpgroup g += P . V[:, 256g .. 256g + 256) over a tile's 64
// keys: 4 wgmma m64n256k16, V MN-major (the tile's boxes 4g .. 4g + 3, keys as
// K). The RS form takes P from registers (the warpgroup's own tile), the SS
// form from a swizzled box (the other warpgroup's tile). Issue and commit
// only: the caller waits.
template <class K>
__device__ __forceinline__ void seesaw_pv_rs(float (&o)[K::kColsPerWarpgroup / 2],
                                             const uint32_t (&a)[K::kBlockN / 16][4], const uint8_t* kv, int g) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  constexpr int kVBoxesPerWg = K::kColsPerWarpgroup / K::kBoxCols;
  warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
    const uint64_t db =
        make_desc_mnmajor_sw128(kv + g * kVBoxesPerWg * K::kBlockN * 128 + kk * 16 * 128, K::kBlockN * 128);
    wgmma_rs<K::kColsPerWarpgroup, kBf16, 1>(o, a[kk], db, 1);
  }
  wgmma_commit_group();
}
template <class K>
__device__ __forceinline__ void seesaw_pv_ss(float (&o)[K::kColsPerWarpgroup / 2], const uint8_t* p_box,
                                             const uint8_t* kv, int g) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  constexpr int kVBoxesPerWg = K::kColsPerWarpgroup / K::kBoxCols;
  warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
    const uint64_t da = make_desc_kmajor_sw128(p_box + kk * 32);
    const uint64_t db =
        make_desc_mnmajor_sw128(kv + g * kVBoxesPerWg * K::kBlockN * 128 + kk * 16 * 128, K::kBlockN * 128);
    wgmma_ss<K::kColsPerWarpgroup, kBf16, 0, 1>(o, da, db, 1);
  }
  wgmma_commit_group();
}

}  // namespace lattn::cuda::sm90
