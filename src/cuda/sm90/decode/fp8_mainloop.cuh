// src/cuda/sm90/decode/fp8_mainloop.cuh — the steps of the key-major fp8
// decode kernel (fp8_traits.h has the shape and why): the producer's paged
// fp8 tile copy, the consumers' Q load (f16, scaled per row, columns
// permuted to match the fp8 fragments), S^T = K Q^T with K dequantized into
// A registers, the online softmax over the keys (M) dimension, and
// O^T += V^T P^T with V^T dequantized into A registers.
//
// Register fragments (wgmma m64nNk16 with A from registers = mma.sync's
// m16n8k16 A layout per warp; lane l: gid = l / 4, t = l % 4): a0 = (row gid,
// k 2t..2t+1), a1 = (row gid + 8, same k), a2 / a3 = the same rows, k + 8.
// A product sums over k, so any permutation of k applied to both operands
// gives the same result; the kernel picks the permutations that let a thread
// read its fp8 bytes with 16-byte loads:
//  * S^T: k = the 576 latent columns. In 64-column chunk c, thread t reads
//    bytes [16t, 16t + 16) of its two key rows; word j of them is k-step j,
//    its bytes b = 0..3 the logical k {2t, 2t+1, 2t+8, 2t+9}. Q (the B
//    operand, written by load_q) is stored with the same permutation.
//  * O^T: k = the 64 keys of the tile. In k-step s, logical keys
//    {2t, 2t+1, 2t+8, 2t+9} are the tile's keys 16s + t + 4b (b = 0..3); P
//    (the B operand, written by the softmax) uses the same map. The M rows
//    (latent columns) of thread (warp w, gid) are the 16 contiguous columns
//    [128w + 16 gid, +16): block mb, half hh is column 128w + 16 gid + 2mb + hh,
//    so one 16-byte load per key gives a thread all its columns.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "cuda/common/fast_math.cuh"  // exp2_approx, kLazyRescaleLog2
#include "cuda/common/index_check.cuh"
#include "cuda/sm80/mma.cuh"  // pack2
#include "cuda/sm90/common/mbarrier.cuh"
#include "cuda/sm90/common/tma.cuh"
#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/common/wgmma.cuh"
#include "cuda/sm90/decode/fp8_traits.h"
#include "cuda/smxx/decode_params.h"
#include "cuda/smxx/decode_pieces.cuh"  // DecodeRequestView

namespace lattn::cuda::sm90 {

// Named barrier ids (0 is __syncthreads): per consumer warpgroup g, the row
// max exchange (kFp8BarMax + g) and P written (kFp8BarP + g); both
// warpgroups together (kFp8BarAll).
enum DecodeFp8Barrier : int { kFp8BarMax = 1, kFp8BarP = 3, kFp8BarAll = 5 };

// Two e4m3 pairs (the 16-bit halves of x) to two f16x2 words, exactly
// (NaN stays NaN): lo from bits 0..15, hi from bits 16..31; in each pair the
// lower byte becomes the lower half.
__device__ __forceinline__ void e4m3x4_to_f16x4(uint32_t x, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.rn.f16x2.e4m3x2 %0, a;\n cvt.rn.f16x2.e4m3x2 %1, b;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(x));
}

// x with every NaN byte (e4m3: low 7 bits all set) replaced by 0.
__device__ __forceinline__ uint32_t e4m3x4_zero_nan(uint32_t x) {
  const uint32_t nan_hi = ((x & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;  // 0x80 where the byte is NaN
  return x & ~(nan_hi | (nan_hi - (nan_hi >> 7)));
}

// Consumers (256 threads): the CTA's 16 rows of [q_nope | q_pe] as the f16 B
// operand of S^T (9 boxes of [16 rows][64], 128-byte swizzle, columns
// permuted as the header says), each row multiplied by 2^e so that its
// largest magnitude lies in [2^14, 2^15) (f16 holds bf16's range only
// scaled); row_scale[n] = scale_log2 * 2^-e undoes it in the scores. Rows past
// the request are 0. Ends with fence.proxy.async (the caller's barrier makes
// the stores visible to the wgmmas).
template <class K>
__device__ __forceinline__ void fp8_load_q(const DecodeParams& p, const DecodeRequestView& pv, uint8_t* q_smem,
                                           float* row_scale) {
  using T = typename K::T;
  constexpr int kChunks8 = K::kD / 8;  // 72 groups of 8 columns per row
  constexpr int kPerThread = (kChunks8 + 15) / 16;
  const int n = threadIdx.x / 16, sub = threadIdx.x % 16;  // 16 threads per row
  const int gr = pv.row0 + n;
  float x[kPerThread][8];
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int c8 = sub + 16 * i;
#pragma unroll
    for (int e = 0; e < 8; ++e) x[i][e] = 0.f;
    if (c8 < kChunks8 && gr < pv.rows) {
      const int col = c8 * 8;
      const T* src = decode_q_src<T, K::kL>(p, pv, gr, col);
      T e8[8];
      if (p.q_vec) {
        const uint4 v = *reinterpret_cast<const uint4*>(src);
        memcpy(e8, &v, 16);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) e8[e] = src[e];
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        x[i][e] = static_cast<float>(e8[e]);
        amax = fmaxf(amax, fabsf(x[i][e]));  // NaN is dropped here; it stays in x
      }
    }
  }
#pragma unroll
  for (int o = 1; o < 16; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  int e = 0;
  if (amax > 0.f && amax <= 3.0e38f) {
    int ex;
    frexpf(amax, &ex);  // amax = f * 2^ex, f in [0.5, 1)
    e = 15 - ex;        // amax * 2^e in [2^14, 2^15)
  }
  const float up = ldexpf(1.f, e);
  if (sub == 0) row_scale[n] = ldexpf(p.scale_log2, -e);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int c8 = sub + 16 * i;
    if (c8 >= kChunks8) continue;
#pragma unroll
    for (int el = 0; el < 8; ++el) {
      const int col = c8 * 8 + el;
      const int c = col / K::kChunkCols, pc = col % K::kChunkCols;
      const int t = pc / 16, j = (pc % 16) / 4, b = pc % 4;
      const int kk = 2 * t + (b & 1) + 8 * (b >> 1);
      *reinterpret_cast<__half*>(q_smem + c * K::kQBoxBytes + swizzle128_offset(n, 16 * j + kk)) =
          __float2half_rn(x[i][el] * up);
    }
  }
  fence_proxy_async_shared();
}

// S^T [64 keys][16 rows] of one tile for this warpgroup (thread: keys
// 16w + gid (+8), rows 8jn + 2t + e in s[4jn + 2h + e]), K dequantized from
// the fp8 tile `kv` chunk by chunk (two chunks in flight).
template <class K>
__device__ __forceinline__ void fp8_compute_qk(const uint8_t* q_smem, const uint8_t* kv, float (&s)[8]) {
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32, gid = lane / 4, t = lane % 4;
  const uint8_t* row0 = kv + (16 * w + gid) * K::kChunkCols + 16 * t;
  const uint64_t q_desc = make_desc_kmajor_sw128(q_smem);
#pragma unroll
  for (int c = 0; c < K::kChunks; ++c) {
    const uint4 w0 = *reinterpret_cast<const uint4*>(row0 + c * K::kChunkBytes);
    const uint4 w1 = *reinterpret_cast<const uint4*>(row0 + c * K::kChunkBytes + 8 * K::kChunkCols);
    const uint32_t r0[4] = {w0.x, w0.y, w0.z, w0.w}, r1[4] = {w1.x, w1.y, w1.z, w1.w};
    uint32_t a[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      e4m3x4_to_f16x4(r0[j], a[j][0], a[j][2]);
      e4m3x4_to_f16x4(r1[j], a[j][1], a[j][3]);
    }
    warpgroup_arrive();
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      wgmma_rs<16, false>(s, a[j], desc_advance(q_desc, c * K::kQBoxBytes + 32 * j), (c | j) != 0);
    }
    wgmma_commit_group();
    wgmma_wait_group<1>();
  }
  wgmma_wait_group<0>();
  fence_operands(s);
}

// Online softmax state of this thread's four rows n = 8jn + 2t + e (index
// i = 2jn + e), shared by the warpgroup's four warps (same m per row).
struct Fp8SoftmaxState {
  float m[4];  // running max, log2 units
  float l[4];  // this thread's partial row sum (its keys only)
};

// Scores -> probabilities for one tile of warpgroup g: scales (row_scale),
// masks keys at or past each row's limit, exchanges the column (row) max
// between the warpgroup's warps, rescales the running sums and writes P^T
// as the PT (16-bit) B operand [16 rows][64 keys] — keys permuted as the
// header says (kPermutedKeys, this kernel), or in tile order (the 16-bit
// key-major kernel, km16_mainloop.cuh, whose V^T is read from shared memory).
// Returns the factors by which O's rows must be rescaled.
template <class K, class PT = __half, bool kPermutedKeys = true>
__device__ __forceinline__ void fp8_softmax_tile(float (&s)[8], Fp8SoftmaxState& st, int key0, bool mask,
                                                 const int (&key_limit)[4], const float (&rsc)[4], int g,
                                                 float* row_max, uint8_t* p_box, float (&alpha)[4]) {
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32, gid = lane / 4, t = lane % 4;
  float mx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
  for (int jn = 0; jn < 2; ++jn) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = 2 * jn + e, key = key0 + 16 * w + gid + 8 * h;
        float x = s[4 * jn + 2 * h + e] * rsc[i];
        if (mask && key >= key_limit[i]) x = -INFINITY;
        s[4 * jn + 2 * h + e] = x;
        mx[i] = fmaxf(mx[i], x);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int o = 4; o < 32; o *= 2) mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], o));
  }
  float* mine = row_max + g * 4 * K::kRows;
  if (gid == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) mine[w * K::kRows + 8 * (i / 2) + 2 * t + (i % 2)] = mx[i];
  }
  named_barrier_sync(kFp8BarMax + g, 128);
  float base[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int n = 8 * (i / 2) + 2 * t + (i % 2);
    float m_tile = mine[n];
#pragma unroll
    for (int ww = 1; ww < 4; ++ww) m_tile = fmaxf(m_tile, mine[ww * K::kRows + n]);
    // Lazy rescaling (kLazyRescaleLog2; the same rule as the 64-row kernel's
    // softmax_tile): the first tile (m = -inf), -inf rows and non-finite
    // maxima take the exact update.
    const float m_new = m_tile - st.m[i] <= kLazyRescaleLog2 ? st.m[i] : fmaxf(st.m[i], m_tile);
    // A row with no key yet keeps m = -inf; subtract 0 then (exp2(-inf) = 0).
    base[i] = m_new == -INFINITY ? 0.f : m_new;
    alpha[i] = exp2_approx(st.m[i] - base[i]);
    st.m[i] = m_new;
    st.l[i] *= alpha[i];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Tile key 16w + gid + 8h is k-step w, within it key q = gid + 8h = t' + 4b.
    const int q = gid + 8 * h, tq = q % 4, b = q / 4;
    const int col = kPermutedKeys ? 16 * w + 2 * tq + (b & 1) + 8 * (b >> 1) : 16 * w + q;
#pragma unroll
    for (int jn = 0; jn < 2; ++jn) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = 2 * jn + e, n = 8 * jn + 2 * t + e;
        const float pr = exp2_approx(s[4 * jn + 2 * h + e] - base[i]);
        st.l[i] += pr;
        if constexpr (std::is_same_v<PT, __half>) {
          *reinterpret_cast<__half*>(p_box + swizzle128_offset(n, col)) = __float2half_rn(pr);
        } else {
          *reinterpret_cast<PT*>(p_box + swizzle128_offset(n, col)) = __float2bfloat16_rn(pr);
        }
      }
    }
  }
  fence_proxy_async_shared();
}

// O^T (this warpgroup: o[mb][4jn + 2hh + e] = column 128w + 16 gid + 2mb + hh,
// row 8jn + 2t + e) = alpha * O^T + V^T P^T over the tile's 64 keys, V^T
// dequantized from the fp8 tile. Keys at or past seq_len are zeroed (their
// bytes are whatever the page holds: NaN poison must not reach O through
// P = 0), and keys in [mask_from, seq_len) get their NaN bytes zeroed: such a
// key is masked for some rows, and a row that does see it has a NaN score
// already (V is part of K), so it is NaN either way. Calls `release` (the
// stage's empty barrier) after the tile's last shared-memory read.
// kFix: the tile reaches past mask_from (a compile-time split, so the
// common tile carries no per-key branch: 16 of them per tile cost ~50
// instructions of branch bookkeeping even when not taken).
template <class K, bool kFix, class Release>
__device__ __forceinline__ void fp8_compute_pv(const uint8_t* p_box, const uint8_t* kv, float (&o)[K::kOBlocks][8],
                                               const float (&alpha)[4], int key0, int mask_from, int seq_len,
                                               Release&& release) {
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32, gid = lane / 4, t = lane % 4;
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
  const int col0 = 128 * w + 16 * gid;  // this thread's 16 latent columns
  const uint8_t* base = kv + (col0 / K::kChunkCols) * K::kChunkBytes + (col0 % K::kChunkCols);
  const uint64_t p_desc = make_desc_kmajor_sw128(p_box);
#pragma unroll
  for (int ks = 0; ks < K::kBlockN / 16; ++ks) {
    uint32_t v[4][4];  // [b][word]: key 16ks + t + 4b, columns col0 + 4 word .. + 3
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int key = 16 * ks + t + 4 * b;
      const uint4 x = *reinterpret_cast<const uint4*>(base + key * K::kChunkCols);
      v[b][0] = x.x, v[b][1] = x.y, v[b][2] = x.z, v[b][3] = x.w;
      if constexpr (kFix) {
        const int abs_key = key0 + key;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          v[b][q] = abs_key >= seq_len ? 0u : abs_key >= mask_from ? e4m3x4_zero_nan(v[b][q]) : v[b][q];
        }
      }
    }
    if (ks == K::kBlockN / 16 - 1) release();
    uint32_t a[K::kOBlocks][4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      // Bytes k = 0..3 of word q are columns 4q + k: block 2q + k / 2, half k % 2.
      const uint32_t x01 = __byte_perm(v[0][q], v[1][q], 0x5140), y01 = __byte_perm(v[0][q], v[1][q], 0x7362);
      const uint32_t x23 = __byte_perm(v[2][q], v[3][q], 0x5140), y23 = __byte_perm(v[2][q], v[3][q], 0x7362);
      e4m3x4_to_f16x4(x01, a[2 * q][0], a[2 * q][1]);
      e4m3x4_to_f16x4(x23, a[2 * q][2], a[2 * q][3]);
      e4m3x4_to_f16x4(y01, a[2 * q + 1][0], a[2 * q + 1][1]);
      e4m3x4_to_f16x4(y23, a[2 * q + 1][2], a[2 * q + 1][3]);
    }
    warpgroup_arrive();
#pragma unroll
    for (int mb = 0; mb < K::kOBlocks; ++mb) {
      wgmma_rs<16, false>(o[mb], a[mb], desc_advance(p_desc, 32 * ks), 1);
    }
    wgmma_commit_group();
    wgmma_wait_group<1>();
  }
  wgmma_wait_group<0>();
#pragma unroll
  for (int mb = 0; mb < K::kOBlocks; ++mb) fence_operands(o[mb]);
}

}  // namespace lattn::cuda::sm90
