// src/cuda/sm90/decode/decode_mainloop.cuh — the steps of the Hopper decode
// kernel's main loop (decode_traits.h has the shape): the producer's paged
// tile copy, the consumers' Q load, S = Q K^T, the online softmax with the
// cross-warpgroup row max, the tail zeroing of V, and O += P V.
#pragma once

#include <cuda.h>

#include <cmath>

#include "cuda/common/fast_math.cuh"  // exp2_approx
#include "cuda/common/index_check.cuh"
#include "cuda/sm80/mma.cuh"  // pack2
#include "cuda/sm90/common/mbarrier.cuh"
#include "cuda/sm90/common/tma.cuh"
#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/common/wgmma.cuh"
#include "cuda/sm90/decode/decode_traits.h"
#include "cuda/smxx/decode_params.h"
#include "cuda/smxx/decode_pieces.cuh"  // DecodeRequestView

namespace lattn::cuda::sm90 {

// Named barrier ids (0 is __syncthreads).
enum DecodeBarrier : int { kBarRowMax = 1, kBarP = 2, kBarConsumers = 3 };

// Eight query elements at src as 16 bytes: one vector load where `vec`
// (16-byte aligned rows and strides), else element by element.
template <class T>
__device__ __forceinline__ uint4 load_q_chunk(const T* src, bool vec) {
  if (vec) return *reinterpret_cast<const uint4*>(src);
  T e[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = src[i];
  uint4 v;
  memcpy(&v, e, 16);
  return v;
}

// Where Q's 16-byte chunk of tile row `row`, columns [col, col + 8), lives
// in shared memory: 9 swizzled boxes of 64 columns.
template <class K>
__device__ __forceinline__ uint32_t q_chunk_offset(int row, int col) {
  return (col / K::kBoxCols) * K::kBoxBytes + swizzle128_offset(row, col % K::kBoxCols);
}

// Consumers (256 threads): Q tile rows [row0, +64) of [q_nope | q_pe] into 9
// swizzled boxes; rows past the request's rows are zero. Ordinary loads and
// stores, then fence.proxy.async so wgmma (async proxy) may read it after the
// caller's barrier.
template <class K>
__device__ __forceinline__ void load_q(const DecodeParams& p, const DecodeRequestView& pv, uint8_t* q_smem) {
  using T = typename K::T;
  constexpr int kChunks = K::kD / 8;  // 16-byte chunks per row (72)
  for (int c = threadIdx.x; c < K::kBlockM * kChunks; c += K::kConsumerThreads) {
    const int row = c / kChunks, chunk = c % kChunks;
    const int gr = pv.row0 + row;
    const int col = chunk * 8;
    const uint4 v =
        gr < pv.rows ? load_q_chunk(decode_q_src<T, K::kL>(p, pv, gr, col), p.q_vec) : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(q_smem + q_chunk_offset<K>(row, col)) = v;
  }
  fence_proxy_async_shared();
}

// load_q's chunks as 16-byte asynchronous copies (cp.async; rows past the
// request's rows zero-filled, their source not read), committed as one group
// per thread: a kernel issues them while the previous piece's last products
// run and start_piece waits for them. Needs p.q_vec (16-byte rows and
// strides); the caller makes sure no wgmma still reads Q.
template <class K>
__device__ __forceinline__ void issue_q_copies(const DecodeParams& p, const DecodeRequestView& pv, uint8_t* q_smem) {
  using T = typename K::T;
  constexpr int kChunks = K::kD / 8;
  const uint32_t base = sm80::smem_addr(q_smem);
#pragma unroll 1
  for (int c = threadIdx.x; c < K::kBlockM * kChunks; c += K::kConsumerThreads) {
    const int row = c / kChunks, col = c % kChunks * 8;
    const bool in = pv.row0 + row < pv.rows;
    const T* src = decode_q_src<T, K::kL>(p, pv, in ? pv.row0 + row : pv.row0, col);  // row0 < rows: a real row
    sm80::cp_async_16(base + q_chunk_offset<K>(row, col), src, in ? 16 : 0);
  }
  sm80::cp_async_commit();
}

// S[64 rows][32 keys] of warpgroup g = Q . K[32g .. 32g + 32)^T over 576
// columns: 36 wgmma m64n32k16, K-major A and B.
template <class K>
__device__ __forceinline__ void compute_qk(const uint8_t* q_smem, const uint8_t* kv, int g,
                                           float (&s)[K::kKeysPerWarpgroup / 2]) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  const uint64_t q_desc = make_desc_kmajor_sw128(q_smem);
  const uint64_t k_desc = make_desc_kmajor_sw128(kv + g * K::kKeysPerWarpgroup * 128);
  warpgroup_arrive();
#pragma unroll
  for (int c = 0; c < K::kBoxes; ++c) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t da = desc_advance(q_desc, c * K::kBoxBytes + kk * 32);
      const uint64_t db = desc_advance(k_desc, c * K::kBlockN * 128 + kk * 32);
      wgmma_ss<K::kKeysPerWarpgroup, kBf16>(s, da, db, (c | kk) != 0);
    }
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(s);
}

// Zeroes the V rows (columns 0..511) of the tile's keys [first, last), by
// the 128 threads of the calling warpgroup, then fence.proxy.async (the
// stores before the async proxy's reads): whatever the page holds past the
// sequence (NaN poison included) must not reach O through 0 * NaN.
template <class K>
__device__ __forceinline__ void zero_v_rows(uint8_t* kv, int first, int last) {
  const int rows = last - first;
  if (rows <= 0) return;
  const int t = warpgroup_thread();
  for (int i = t; i < rows * K::kVBoxes * 8; i += 128) {
    const int row = first + i / (K::kVBoxes * 8), rest = i % (K::kVBoxes * 8);
    const int box = rest / 8, chunk = rest % 8;
    *reinterpret_cast<uint4*>(kv + box * K::kBlockN * 128 + row * 128 + chunk * 16) = make_uint4(0, 0, 0, 0);
  }
  fence_proxy_async_shared();
}

// The serial kernel's tail: keys [valid, 64) among this warpgroup's S keys
// [32g, 32g + 32). The other warpgroup reads them in P V only after the
// row-max barrier.
template <class K>
__device__ __forceinline__ void zero_tail_rows(uint8_t* kv, int valid, int g) {
  zero_v_rows<K>(kv, max(valid, g * K::kKeysPerWarpgroup), (g + 1) * K::kKeysPerWarpgroup);
}

// Keys [k_lo, k_hi) of the tile (key0 = its first key) are masked for some
// row of the CTA (s_q > 1: a query token does not see the tokens after it).
// A masked key must contribute nothing (docs/mla.md, "NaN and inf"), but
// P = 0 times a NaN or inf value is NaN in P V, so their non-finite V
// elements (columns 0..511) are zeroed in the tile after S = Q K^T has read
// it; the first key that had one is recorded in *bad_key (atomicMin; the
// caller resets it to INT_MAX and reads it after a barrier) so that a row
// which may see that key is made NaN, as the math makes it. Every consumer
// thread calls it after the row-max barrier (both warpgroups' Q K^T done) and
// before the P barrier (P V not started).
template <class K>
__device__ __forceinline__ void sanitize_masked_keys(uint8_t* kv, int key0, int k_lo, int k_hi, int* bad_key) {
  using T = typename K::T;
  for (int idx = threadIdx.x; idx < (k_hi - k_lo) * K::kL; idx += K::kConsumerThreads) {
    const int key = k_lo + idx / K::kL, col = idx % K::kL;
    T* x = reinterpret_cast<T*>(kv + (col / K::kBoxCols) * K::kBlockN * 128 +
                                swizzle128_offset(key - key0, col % K::kBoxCols));
    if (!isfinite(static_cast<float>(*x))) {
      *x = T(0.f);
      atomicMin(bad_key, key);
    }
  }
  fence_proxy_async_shared();
}

// Online softmax state of this thread's two rows (r0 = 16 w + l/4, r0 + 8).
struct SoftmaxState {
  float m[2];  // running max, log2 units (scores * scale * log2 e)
  float l[2];  // this thread's partial row sum (its keys only)
};

// The start of a (request, key range) piece in the 64-row kernels (both
// schedules), by every consumer thread: the previous piece's wgmmas are
// complete (waited) in both warpgroups before anyone overwrites Q, then Q is
// loaded; key_limit[i] = how many keys row r0 + 8i may see (causal within the
// request: its token's position + 1); O and the softmax state start empty.
// Returns mask_from: tiles reaching past it need masking.
// q_issued: the caller issued Q's copies earlier (issue_q_copies, after both
// warpgroups' last Q K^T of the previous piece): each thread waits for its
// own, then one barrier makes all of them visible.
template <class K>
__device__ __forceinline__ int start_piece(const DecodeParams& p, const DecodeRequestView& pv, uint8_t* q_smem,
                                           int (&key_limit)[2], SoftmaxState& st, float (&o)[K::kColsPerWarpgroup / 2],
                                           bool q_issued = false) {
  if (q_issued) {
    sm80::cp_async_wait<0>();
    fence_proxy_async_shared();
  } else {
    named_barrier_sync(kBarConsumers, K::kConsumerThreads);
    load_q<K>(p, pv, q_smem);
  }
  named_barrier_sync(kBarConsumers, K::kConsumerThreads);
  const int r0 = 16 * warp_in_warpgroup() + (threadIdx.x % 32) / 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = pv.row0 + r0 + 8 * i;
    key_limit[i] = gr < pv.rows ? pv.seq_len - pv.s_q + gr / p.num_heads + 1 : pv.seq_len;
    st.m[i] = -INFINITY;
    st.l[i] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < K::kColsPerWarpgroup / 2; ++i) o[i] = 0.f;
  return pv.seq_len - pv.s_q + 1;
}

// The lazy running-max update of one row, from its old max m_old and a
// tile's max m_tile (log2 units). Lazy rescaling: the running max moves only
// when the tile's max exceeds it by more than kLazyRescaleLog2, so most
// tiles keep alpha = 1 and O's rescale can be skipped. P = exp2(s - base)
// then stays below 2^kLazyRescaleLog2 (256: f16 and bf16 hold it at full
// relative precision), and O, l and m stay consistent, so the result is the
// same softmax. The first tile (m_old = -inf: difference +inf), -inf rows
// (difference NaN) and non-finite maxima take the exact update. Outputs: the
// new max, the subtrahend of the exponentials (0 for a row with no key yet:
// exp2(-inf) = 0, never inf - inf) and the factor alpha taking values
// relative to m_old to the new max. ex2.approx.ftz: one MUFU.EX2 (exp2f's
// denormal handling added three instructions per call); results below
// 2^-126 flush to 0, which no 16-bit P nor f32 sum can tell apart from 0
// next to the row's max term. Every warpgroup that applies the same update
// to the same values gets the same bits.
__device__ __forceinline__ void lazy_row_max(float m_old, float m_tile, float& m_new, float& base, float& alpha) {
  m_new = m_tile - m_old <= kLazyRescaleLog2 ? m_old : fmaxf(m_old, m_tile);
  base = m_new == -INFINITY ? 0.f : m_new;
  alpha = exp2_approx(m_old - base);
}
// lazy_row_max's alpha from the two maxima alone: the factor taking values
// relative to m_old to m_new (the seesaw's warpgroups recompute it from the
// other's published max, bit for bit; written with lazy_row_max's own
// expressions, which it does not call: doing so reordered the serial
// kernel's compiled blocks).
__device__ __forceinline__ float lazy_rescale_factor(float m_old, float m_new) {
  return exp2_approx(m_old - (m_new == -INFINITY ? 0.f : m_new));
}

// Scores of 8 kGroups keys (accumulator layout: s[4j + 0..1] row r0, keys
// key_base + 8j + 2(lane % 4) + {0, 1}; s[4j + 2..3] the same keys of row
// r0 + 8) in log2 units (scale folded in), keys at or past each row's limit
// masked to -inf (when `mask`); mx = the max of this thread's two rows over
// the 4 threads that share them.
template <int kGroups>
__device__ __forceinline__ void mask_and_row_max(float (&s)[4 * kGroups], int key_base, bool mask,
                                                 const int (&key_limit)[2], float scale_log2, float (&mx)[2]) {
  const int lane = threadIdx.x % 32;
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key_base + 8 * j + 2 * (lane % 4) + (e % 2);
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

// O's rows r0, r0 + 8 (kCols / 2 accumulators of an m64nKCols product) times
// f[0], f[1]; skipped where it changes nothing (x * 1 = x), which lazy
// rescaling makes the common case (kCols / 2 multiplies per thread otherwise).
template <int kCols>
__device__ __forceinline__ void scale_o_rows(float (&o)[kCols / 2], const float (&f)[2]) {
  if (__all_sync(0xffffffffu, f[0] == 1.f && f[1] == 1.f)) return;
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j) {
    o[4 * j] *= f[0];
    o[4 * j + 1] *= f[0];
    o[4 * j + 2] *= f[1];
    o[4 * j + 3] *= f[1];
  }
}

// Scores -> probabilities for one tile: masks keys at or past each row's
// limit, exchanges the row max with the other warpgroup, rescales the
// running sums, writes P (16-bit) into the swizzled P box and returns the
// factors by which O's two rows must be rescaled.
template <class K>
__device__ __forceinline__ void softmax_tile(float (&s)[K::kKeysPerWarpgroup / 2], SoftmaxState& st, int key0,
                                             bool mask, const int (&key_limit)[2], float scale_log2, int g,
                                             float* row_max, uint8_t* p_smem, float (&alpha)[2]) {
  using T = typename K::T;
  constexpr int kGroups = K::kKeysPerWarpgroup / 8;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
  float mx[2];
  mask_and_row_max<kGroups>(s, key0 + g * K::kKeysPerWarpgroup, mask, key_limit, scale_log2, mx);
  if (lane % 4 == 0) {
    row_max[g * K::kBlockM + r0] = mx[0];
    row_max[g * K::kBlockM + r0 + 8] = mx[1];
  }
  named_barrier_sync(kBarRowMax, K::kConsumerThreads);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    // Both warpgroups see the same (m, tile max) and take the same decision
    // (lazy_row_max); compute_pv skips O's rescale where alpha = 1 (128
    // multiplies per thread in front of P V).
    const float other = row_max[(1 - g) * K::kBlockM + r0 + 8 * i];
    float m_new, base;
    lazy_row_max(st.m[i], fmaxf(mx[i], other), m_new, base, alpha[i]);
    st.m[i] = m_new;
    mx[i] = base;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pr = exp2_approx(s[4 * j + e] - mx[e / 2]);
      s[4 * j + e] = pr;
      sum[e / 2] += pr;
    }
    const int key = g * K::kKeysPerWarpgroup + 8 * j + 2 * (lane % 4);
    *reinterpret_cast<uint32_t*>(p_smem + swizzle128_offset(r0, key)) = sm80::pack2<T>(s[4 * j], s[4 * j + 1]);
    *reinterpret_cast<uint32_t*>(p_smem + swizzle128_offset(r0 + 8, key)) = sm80::pack2<T>(s[4 * j + 2], s[4 * j + 3]);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) st.l[i] = st.l[i] * alpha[i] + sum[i];
  fence_proxy_async_shared();
}

// O[64][256] of warpgroup g (columns [256g, +256)) = alpha * O + P . V over
// the tile's 64 keys: 4 wgmma m64n256k16, P K-major from the P box, V
// MN-major (the tile's boxes 4g .. 4g + 3, keys as K).
template <class K>
__device__ __forceinline__ void compute_pv(const uint8_t* p_smem, const uint8_t* kv, int g,
                                           float (&o)[K::kColsPerWarpgroup / 2], const float (&alpha)[2]) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  constexpr int kVBoxesPerWg = K::kColsPerWarpgroup / K::kBoxCols;
  // The rescale sits between the P barrier and the first wgmma (256 issue
  // slots per scheduler for the two warps): skipped where alpha = 1.
  scale_o_rows<K::kColsPerWarpgroup>(o, alpha);
  const uint64_t p_desc = make_desc_kmajor_sw128(p_smem);
  const uint64_t v_desc = make_desc_mnmajor_sw128(kv + g * kVBoxesPerWg * K::kBlockN * 128, K::kBlockN * 128);
  warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
    const uint64_t da = desc_advance(p_desc, kk * 32);
    const uint64_t db = desc_advance(v_desc, kk * 16 * 128);
    wgmma_ss<K::kColsPerWarpgroup, kBf16, 0, 1>(o, da, db, 1);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(o);
}

}  // namespace lattn::cuda::sm90
