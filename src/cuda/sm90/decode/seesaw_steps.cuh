// src/cuda/sm90/decode/seesaw_steps.cuh — the steps of the seesaw decode
// kernel (seesaw_traits.h has the shape, seesaw_kernel.cuh the schedule):
// the producer's paged copy of one release group, S = Q K^T for a whole
// 64-key tile, the tail and NaN cleaning of a tile's V, the exponentials, P as wgmma A fragments or as a swizzled
// shared-memory box, and the two forms of O += P V.
//
// Accumulator layout of S (m64n64k16, f32, 32 registers): thread (warp w,
// lane l) holds rows r0 = 16 w + l/4 and r0 + 8; s[4j + 0..1] are row r0,
// keys 8j + 2(l%4) + {0,1}, s[4j + 2..3] the same keys of row r0 + 8.
#pragma once

#include <cuda.h>

#include <climits>
#include <cmath>

#include "cuda/common/fast_math.cuh"  // exp2_approx
#include "cuda/common/index_check.cuh"
#include "cuda/sm80/mma.cuh"  // pack2
#include "cuda/sm90/common/mbarrier.cuh"
#include "cuda/sm90/common/tma.cuh"
#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/common/wgmma.cuh"
#include "cuda/sm90/decode/decode_mainloop.cuh"  // zero_v_rows, mask_and_row_max, scale_o_rows
#include "cuda/sm90/decode/decode_producer.cuh"  // tile_source
#include "cuda/sm90/decode/seesaw_traits.h"
#include "cuda/smxx/decode_params.h"
#include "cuda/smxx/decode_pieces.cuh"  // DecodeRequestView

namespace lattn::cuda::sm90 {

// Producer (one thread): the boxes of release group `group` of KV tile
// `tile` of the view's request (keys [64 tile, +64), inside one page: the
// page size is a multiple of 64) into the stage at `dst` ([64 keys][64
// columns] boxes, box c at dst + 8 KB c), box c completing on full[c]. A bad
// block id (index_check.cuh) is recorded and the copy aimed at page -1,
// outside the tensor map: the copy engine fills the boxes with zeros.
template <class K>
__device__ __forceinline__ void seesaw_load_group(const CUtensorMap* cache_map, const DecodeParams& p,
                                                  const DecodeRequestView& v, int tile, int stage, int group,
                                                  uint8_t* dst, uint64_t* full, CacheHint hint) {
  const TileSource src = tile_source<K::kBlockN>(p, v, tile);
#pragma unroll
  for (int c = 0; c < K::kBoxes; ++c) {
    if (K::box_group(stage, c) != group) continue;
    mbarrier_arrive_expect_tx(&full[c], K::kBoxTxBytes);
    tma_load_3d(dst + c * K::kBlockN * 128, cache_map, &full[c], c * K::kBoxCols, src.row, src.page, hint);
  }
}

// S[64 rows][64 keys] = Q . K^T over 576 columns: 36 wgmma m64n64k16 (Q and
// K K-major from shared memory), each box issued as soon as it has landed,
// in the order the stage's halves are usually refilled: each warpgroup reads
// first the half it frees itself (tile A's left V half, warpgroup 0; tile
// B's right half, warpgroup 1), so stage 1 reads boxes 4..7 before 0..3 and
// k_pe (measured within the noise of the plain order, docs/perf.md).
template <class K, int kStage>
__device__ __forceinline__ void seesaw_qk(const uint8_t* q_smem, const uint8_t* kv, uint64_t* full, uint32_t parity,
                                          float (&s)[K::kBlockN / 2]) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  const uint64_t q_desc = make_desc_kmajor_sw128(q_smem);
  const uint64_t k_desc = make_desc_kmajor_sw128(kv);
#pragma unroll
  for (int i = 0; i < K::kBoxes; ++i) {
    const int c = kStage == 0 ? i : i < 4 ? i + 4 : i < 8 ? i - 4 : i;
    mbarrier_wait(&full[c], parity);
    warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t da = desc_advance(q_desc, c * K::kBoxBytes + kk * 32);
      const uint64_t db = desc_advance(k_desc, c * K::kBlockN * 128 + kk * 32);
      wgmma_ss<K::kBlockN, kBf16>(s, da, db, (i | kk) != 0);
    }
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(s);
}

// Zeroes the V rows of keys [valid, 64) of a tile (zero_v_rows), by the 128
// threads of the warpgroup that owns it, after its S (which masks those keys)
// has completed; the warpgroup barrier orders the stores before its own wgmma
// reads them, and the other warpgroup reads them only after the hand-over.
template <class K>
__device__ __forceinline__ void seesaw_zero_tail(uint8_t* kv, int valid, int wg_barrier) {
  zero_v_rows<K>(kv, valid, K::kBlockN);
  named_barrier_sync(wg_barrier, 128);
}

// Keys [k_lo, k_hi) of a tile (key0 = its first key) are masked for some rows
// of the CTA (s_q > 1: a query token does not see the tokens after it). A
// masked key must contribute nothing (docs/mla.md, "NaN and inf"), but P = 0
// times a NaN or inf value is NaN in P V, so the non-finite V elements
// (columns 0..511) of those keys are zeroed after the warpgroup's S has read
// the tile and before any P V reads it. Returns the first key that had one
// (INT_MAX if none): the caller makes the rows that may see it NaN, as the
// math does. Called by the 128 threads of the warpgroup that owns the tile;
// `flag` is the warpgroup's own int, `wg_barrier` its own named barrier.
template <class K>
__device__ __forceinline__ int seesaw_sanitize(uint8_t* kv, int key0, int k_lo, int k_hi, int* flag, int wg_barrier) {
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

// s := exp2(s - base) per row (base: lazy_row_max's subtrahend); sum = this
// thread's partial row sums.
template <class K>
__device__ __forceinline__ void seesaw_exp(float (&s)[K::kBlockN / 2], const float (&base)[2], float (&sum)[2]) {
  sum[0] = sum[1] = 0.f;
#pragma unroll
  for (int i = 0; i < K::kBlockN / 2; ++i) {
    const int r = (i % 4) / 2;
    s[i] = exp2_approx(s[i] - base[r]);
    sum[r] += s[i];
  }
}

// P (16-bit) as the A fragments of 4 k16 steps of an RS wgmma (wgmma.cuh):
// the accumulator layout of S is the A layout of the next product.
template <class K>
__device__ __forceinline__ void seesaw_pack_p(const float (&s)[K::kBlockN / 2], uint32_t (&a)[K::kBlockN / 16][4]) {
  using T = typename K::T;
#pragma unroll
  for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) a[kk][r] = sm80::pack2<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  }
}

// P's fragments into a swizzled [64 rows][64 keys] box, then
// fence.proxy.async: the box is a K-major A operand for the other
// warpgroup's SS wgmma after the hand-over.
template <class K>
__device__ __forceinline__ void seesaw_store_p(const uint32_t (&a)[K::kBlockN / 16][4], uint8_t* box) {
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
#pragma unroll
  for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // keys 16 kk + 8 h + 2 (lane % 4): registers 2h (row r0), 2h + 1 (r0 + 8)
      const int key = 16 * kk + 8 * h + 2 * (lane % 4);
      *reinterpret_cast<uint32_t*>(box + swizzle128_offset(r0, key)) = a[kk][2 * h];
      *reinterpret_cast<uint32_t*>(box + swizzle128_offset(r0 + 8, key)) = a[kk][2 * h + 1];
    }
  }
  fence_proxy_async_shared();
}

// The cleaning of a warpgroup's own tile after its S (keys [key0, +64)):
// the V rows past the sequence zeroed, and where the tile holds keys only
// some rows may see (from mask_from on), their non-finite V values; returns
// the first key that had one (INT_MAX if none).
template <class K>
__device__ __forceinline__ int seesaw_clean_tile(uint8_t* kv, int key0, int seq_len, int mask_from, int* flag,
                                                 int wg_barrier) {
  if (key0 + K::kBlockN > seq_len) seesaw_zero_tail<K>(kv, seq_len - key0, wg_barrier);
  if (mask_from >= seq_len || key0 + K::kBlockN <= mask_from) return INT_MAX;
  return seesaw_sanitize<K>(kv, key0, max(key0, mask_from), min(key0 + K::kBlockN, seq_len), flag, wg_barrier);
}

// A warpgroup's hand-over of its tile: P = 2^(S - base), the row sums into
// st.l (after st.l *= f), NaN for the rows that may see a non-finite value
// (first_bad, seesaw_clean_tile), P's fragments into `pa` and the tile's
// k_pe box, the tile's row max m_new into its slot, then this thread's
// arrival on `handed` (which orders its stores before the other
// warpgroup's reads).
template <class K>
__device__ __forceinline__ void seesaw_hand_over(float (&s)[K::kBlockN / 2], const float (&base)[2],
                                                 const float (&f)[2], int first_bad, const int (&key_limit)[2],
                                                 SoftmaxState& st, uint32_t (&pa)[K::kBlockN / 16][4],
                                                 const float (&m_new)[2], float* m_slot, uint8_t* p_box,
                                                 uint64_t* handed) {
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
  float sum[2];
  seesaw_exp<K>(s, base, sum);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    st.l[i] = st.l[i] * f[i] + sum[i];
    if (first_bad < key_limit[i]) st.l[i] = NAN;  // this row sees a non-finite value: NaN, as the math
  }
  seesaw_pack_p<K>(s, pa);
  if (lane % 4 == 0) {
    m_slot[r0] = m_new[0];
    m_slot[r0 + 8] = m_new[1];
  }
  seesaw_store_p<K>(pa, p_box);
  mbarrier_arrive(handed);
}

// O[64][256] of warpgroup g += P . V[:, 256g .. 256g + 256) over a tile's 64
// keys: 4 wgmma m64n256k16, V MN-major (the tile's boxes 4g .. 4g + 3, keys
// as K). The RS form takes P from registers (the warpgroup's own tile), the
// SS form from a swizzled box (the other warpgroup's tile). Issue and commit
// only: the caller waits.
template <class K>
__device__ __forceinline__ void seesaw_pv_rs(float (&o)[K::kColsPerWarpgroup / 2],
                                             const uint32_t (&a)[K::kBlockN / 16][4], const uint8_t* kv, int g) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  constexpr int kVBoxesPerWg = K::kColsPerWarpgroup / K::kBoxCols;
  const uint64_t v_desc = make_desc_mnmajor_sw128(kv + g * kVBoxesPerWg * K::kBlockN * 128, K::kBlockN * 128);
  warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
    wgmma_rs<K::kColsPerWarpgroup, kBf16, 1>(o, a[kk], desc_advance(v_desc, kk * 16 * 128), 1);
  }
  wgmma_commit_group();
}
template <class K>
__device__ __forceinline__ void seesaw_pv_ss(float (&o)[K::kColsPerWarpgroup / 2], const uint8_t* p_box,
                                             const uint8_t* kv, int g) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  constexpr int kVBoxesPerWg = K::kColsPerWarpgroup / K::kBoxCols;
  const uint64_t p_desc = make_desc_kmajor_sw128(p_box);
  const uint64_t v_desc = make_desc_mnmajor_sw128(kv + g * kVBoxesPerWg * K::kBlockN * 128, K::kBlockN * 128);
  warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
    wgmma_ss<K::kColsPerWarpgroup, kBf16, 0, 1>(o, desc_advance(p_desc, kk * 32), desc_advance(v_desc, kk * 16 * 128),
                                                1);
  }
  wgmma_commit_group();
}

}  // namespace lattn::cuda::sm90
