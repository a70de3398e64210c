// src/cuda/sm80/decode/decode_mainloop.cuh — the stages of the decode kernel's main
// loop, each one step of the algorithm (FlashInfer's naming): load_q,
// load_kv (cp.async, paged), convert_fp8_tile, compute_qk, update_softmax
// (online softmax across warps), compute_pv.
#pragma once

#include <cuda_fp8.h>

#include <climits>
#include <cmath>

#include "cuda/common/index_check.cuh"
#include "cuda/sm80/decode/decode_traits.h"
#include "cuda/sm80/mma.cuh"
#include "cuda/smxx/decode_params.h"
#include "cuda/smxx/decode_pieces.cuh"  // DecodeRequestView

namespace lattn::cuda::sm80 {

// Q tile [kBlockM][kD] <- rows row0.. of [q_nope | q_pe]; rows past the
// request's rows are zero. cp.async when rows are 16-byte aligned.
template <class K>
__device__ __forceinline__ void load_q(const DecodeParams& p, const DecodeRequestView& rv, typename K::T* q_smem) {
  using T = typename K::T;
  const int tid = threadIdx.x;
  for (int c = tid; c < K::kBlockM * K::kChunksPerRow; c += K::kThreads) {
    const int row = c / K::kChunksPerRow, chunk = c % K::kChunksPerRow;
    const int gr = rv.row0 + row;
    const bool valid = gr < rv.rows;
    const T* src = decode_q_src<T, K::kL>(p, rv, gr, chunk * 8);
    T* dst = q_smem + swizzle<K::kD>(row, chunk * 8);
    if (p.q_vec) {
      cp_async_16(smem_addr(dst), valid ? src : p.q_nope, valid ? 16 : 0);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[i] = valid ? src[i] : T(0.f);
    }
  }
}

// Starts the copy of KV tile `tile` (keys [tile * kBlockN, ...)) of the
// request into `dst` (16-bit cache: the swizzled tile; fp8 cache: a raw
// staging tile). Keys at or past seq_len are zero-filled and their block-table
// entries are never read (they may point anywhere).
template <class K>
__device__ __forceinline__ void load_kv(const DecodeParams& p, const DecodeRequestView& rv, int tile, void* dst) {
  using Cache = typename K::Cache;
  constexpr int kChunks = K::kFp8 ? K::kFp8ChunksPerRow : K::kChunksPerRow;
  constexpr int kElemsPerChunk = 16 / int(sizeof(Cache));
  const int key0 = tile * K::kBlockN;
  const Cache* cache = static_cast<const Cache*>(p.cache);
  // Fast path: the whole tile lies in one page (page size a multiple of kBlockN).
  const bool one_page = p.block_size % K::kBlockN == 0;
  // Block ids are checked (index_check.cuh): a bad one is recorded and its
  // keys are zero-filled instead of read from outside the cache.
  int64_t tile_base = 0, tile_block = 0;
  if (one_page) {
    tile_block = checked_block_id(rv.table, key0 / p.block_size, p.table_width, p.num_blocks, p.index_violations);
    tile_base = tile_block < 0 ? 0 : tile_block * p.cache_block_stride + int64_t(key0 % p.block_size) * K::kD;
  }
  for (int c = threadIdx.x; c < K::kBlockN * kChunks; c += K::kThreads) {
    const int row = c / kChunks, chunk = c % kChunks;
    const int key = key0 + row;
    bool valid = key < rv.seq_len;
    int64_t entry = 0;
    if (one_page) {
      valid = valid && tile_block >= 0;
      entry = tile_base + int64_t(row) * K::kD;
    } else if (valid) {
      const int64_t block =
          checked_block_id(rv.table, key / p.block_size, p.table_width, p.num_blocks, p.index_violations);
      valid = block >= 0;
      entry = valid ? block * p.cache_block_stride + int64_t(key % p.block_size) * K::kD : 0;
    }
    const Cache* src = cache + entry + chunk * kElemsPerChunk;
    uint32_t d;
    if constexpr (K::kFp8) {
      d = smem_addr(static_cast<char*>(dst) + row * K::kD + chunk * 16);
    } else {
      d = smem_addr(static_cast<typename K::T*>(dst) + swizzle<K::kD>(row, chunk * 8));
    }
    cp_async_16(d, valid ? src : cache, valid ? 16 : 0);
  }
}

// fp8 -> T for a whole tile: raw [kBlockN][kD] bytes -> swizzled 16-bit tile.
// Exact (every e4m3 value is representable in f16 and bf16); the cache scale
// is applied to the scores and the output instead.
template <class K>
__device__ __forceinline__ void convert_fp8_tile(const uint8_t* staging, typename K::T* k_smem) {
  using T = typename K::T;
#pragma unroll 1
  for (int c = threadIdx.x; c < K::kBlockN * K::kChunksPerRow; c += K::kThreads) {
    const int row = c / K::kChunksPerRow, chunk = c % K::kChunksPerRow;
    const uint2 raw = *reinterpret_cast<const uint2*>(staging + row * K::kD + chunk * 8);
    const __nv_fp8x2_storage_t* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&raw);
    uint4 packed;
    uint32_t* words = reinterpret_cast<uint32_t*>(&packed);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3);
      if constexpr (std::is_same_v<T, __half>) {
        words[i] = uint32_t(h.x) | (uint32_t(h.y) << 16);
      } else {
        const float2 f = __half22float2(__half2(h));
        words[i] = pack2<T>(f.x, f.y);
      }
    }
    *reinterpret_cast<uint4*>(k_smem + swizzle<K::kD>(row, chunk * 8)) = packed;
  }
}

// Q as mma A fragments for all kD / 16 k-steps (the kQInRegs configurations):
// read once per request piece from the swizzled Q tile in shared memory.
template <class K>
struct QFragments {
  uint32_t a[K::kQInRegs ? K::kD / 16 : 1][4];
};
template <class K>
__device__ __forceinline__ void load_q_fragments(const typename K::T* q_tile, QFragments<K>& q) {
  if constexpr (K::kQInRegs) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < K::kD / 16; ++kk) {
      ldmatrix_x4(q.a[kk], smem_addr(q_tile + swizzle<K::kD>(lane % 16, kk * 16 + (lane / 16) * 8)));
    }
  }
}

// Phase 1 with Q in registers (16 rows, one 8-key tile per warp): two
// independent mma chains (even / odd k-steps).
template <class K>
__device__ __forceinline__ void compute_qk_qregs(const QFragments<K>& q, const typename K::T* k_smem, int cg,
                                                 float (&s)[K::kNTilesS][4]) {
  static_assert(K::kNTilesS == 1 && K::kRowGroups == 1, "Q in registers: 16 rows, 8 keys per warp");
  using T = typename K::T;
  const int lane = threadIdx.x % 32;
  float s_odd[4] = {0.f, 0.f, 0.f, 0.f};
  s[0][0] = s[0][1] = s[0][2] = s[0][3] = 0.f;
  const int key = cg * K::kKeysPerWarp + lane % 8;
#pragma unroll
  for (int kk = 0; kk < K::kD / 16; ++kk) {
    uint32_t b[2];
    ldmatrix_x2(b, smem_addr(k_smem + swizzle<K::kD>(key, kk * 16 + ((lane / 8) % 2) * 8)));
    if (kk % 2 == 0) {
      mma_16816<T>(s[0], q.a[kk], b[0], b[1]);
    } else {
      mma_16816<T>(s_odd, q.a[kk], b[0], b[1]);
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) s[0][e] += s_odd[e];
}

// Phase 1: s[nt] (this warp's 16 rows x kKeysPerWarp keys) = Q K^T over kD.
template <class K>
__device__ __forceinline__ void compute_qk(const typename K::T* q_smem, const typename K::T* k_smem, int rg, int cg,
                                           float (&s)[K::kNTilesS][4]) {
  using T = typename K::T;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int nt = 0; nt < K::kNTilesS; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
  const int a_row = rg * 16 + lane % 16;
  const int a_col = (lane / 16) * 8;
  const int key_base = cg * K::kKeysPerWarp;
  // With one 8-key tile per warp, odd k-steps accumulate separately: two
  // independent mma chains instead of one 36 deep (latency, not throughput).
  float s_odd[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
  for (int kk = 0; kk < K::kD / 16; ++kk) {
    uint32_t a[4];
    ldmatrix_x4(a, smem_addr(q_smem + swizzle<K::kD>(a_row, kk * 16 + a_col)));
    if constexpr (K::kNTilesS == 1) {
      uint32_t b[2];
      // x2: lanes 0-15 give the addresses (keys 0-7 at k 0-7, then k 8-15).
      const int key = key_base + lane % 8;
      ldmatrix_x2(b, smem_addr(k_smem + swizzle<K::kD>(key, kk * 16 + ((lane / 8) % 2) * 8)));
      if (kk % 2 == 0) {
        mma_16816<T>(s[0], a, b[0], b[1]);
      } else {
        mma_16816<T>(s_odd, a, b[0], b[1]);
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < K::kNTilesS; nt += 2) {
        uint32_t b[4];
        const int key = key_base + nt * 8 + (lane / 16) * 8 + lane % 8;
        ldmatrix_x4(b, smem_addr(k_smem + swizzle<K::kD>(key, kk * 16 + ((lane / 8) % 2) * 8)));
        mma_16816<T>(s[nt], a, b[0], b[1]);
        mma_16816<T>(s[nt + 1], a, b[2], b[3]);
      }
    }
  }
  if constexpr (K::kNTilesS == 1) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][e] += s_odd[e];
  }
}

// Running softmax state of the two rows (lane/4 and lane/4 + 8 of the warp's
// row group) this thread holds in phase 1: the CTA-wide running max (log2
// units) and this thread's partial row sum over its own key columns. All
// threads of a row share the max, so partial sums add up at the end.
struct SoftmaxState {
  float m[2];
  float l[2];
};

// Row maxima propagate NaN (max_nan): a NaN score makes the whole row NaN.
__device__ __forceinline__ float quad_max(float v) {
  v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return max_nan(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Phase 1 -> 2: scales and masks the scores, updates the running max across
// the warps of each row group (through `reduce`), turns scores into
// probabilities written to the P tile, and publishes each row's rescale
// factor alpha = exp2(m_old - m_new) in `row_alpha` for phase 2.
// key_limit[i]: keys >= this are masked for row i (causal + sequence end).
template <class K>
__device__ __forceinline__ void update_softmax(float (&s)[K::kNTilesS][4], SoftmaxState& st, int key0, bool need_mask,
                                               const int (&key_limit)[2], float scale_log2, int rg, int cg,
                                               float* reduce, float* row_alpha, typename K::T* p_smem) {
  using T = typename K::T;
  const int lane = threadIdx.x % 32;
  const int rows[2] = {rg * 16 + lane / 4, rg * 16 + lane / 4 + 8};
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < K::kNTilesS; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int half = e / 2;  // 0: row lane/4, 1: row lane/4 + 8
      float v = s[nt][e] * scale_log2;
      if (need_mask) {
        const int key = key0 + cg * K::kKeysPerWarp + nt * 8 + (lane % 4) * 2 + (e % 2);
        if (key >= key_limit[half]) v = -INFINITY;
      }
      s[nt][e] = v;
      mx[half] = max_nan(mx[half], v);
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mx[i] = quad_max(mx[i]);
    if (lane % 4 == 0) reduce[cg * K::kBlockM + rows[i]] = mx[i];
  }
  __syncthreads();
  float m_new[2], alpha[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float tile_max = reduce[rows[i]];
#pragma unroll
    for (int g = 1; g < K::kColGroups; ++g) tile_max = max_nan(tile_max, reduce[g * K::kBlockM + rows[i]]);
    m_new[i] = max_nan(st.m[i], tile_max);
    // A row that has seen no key yet keeps m = -inf: nothing to rescale, and
    // its probabilities are 0 (never exp2(-inf - -inf) = NaN).
    alpha[i] = m_new[i] == -INFINITY ? 1.f : exp2f(st.m[i] - m_new[i]);
    st.l[i] *= alpha[i];
    st.m[i] = m_new[i];
  }
#pragma unroll
  for (int nt = 0; nt < K::kNTilesS; ++nt) {
    float pr[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int half = e / 2;
      pr[e] = m_new[half] == -INFINITY ? 0.f : exp2f(s[nt][e] - m_new[half]);
      st.l[half] += pr[e];
    }
    const int col = cg * K::kKeysPerWarp + nt * 8 + (lane % 4) * 2;
    *reinterpret_cast<uint32_t*>(p_smem + rows[0] * K::kPStride + col) = pack2<T>(pr[0], pr[1]);
    *reinterpret_cast<uint32_t*>(p_smem + rows[1] * K::kPStride + col) = pack2<T>(pr[2], pr[3]);
  }
  if (cg == 0 && lane % 4 == 0) {
    row_alpha[rows[0]] = alpha[0];
    row_alpha[rows[1]] = alpha[1];
  }
  __syncthreads();
}

// Phase 2: o (all kBlockM rows x this warp's kColsPerWarp columns) =
// alpha * o + P V, with V = the first L columns of the K tile.
template <class K>
__device__ __forceinline__ void compute_pv(const typename K::T* p_smem, const typename K::T* k_smem,
                                           const float* row_alpha, int warp, float (&o)[K::kMTiles][K::kNTilesO][4]) {
  using T = typename K::T;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int mi = 0; mi < K::kMTiles; ++mi) {
    const float a_lo = row_alpha[mi * 16 + lane / 4], a_hi = row_alpha[mi * 16 + lane / 4 + 8];
#pragma unroll
    for (int ni = 0; ni < K::kNTilesO; ++ni) {
      o[mi][ni][0] *= a_lo;
      o[mi][ni][1] *= a_lo;
      o[mi][ni][2] *= a_hi;
      o[mi][ni][3] *= a_hi;
    }
  }
  const int col_base = warp * K::kColsPerWarp;
#pragma unroll
  for (int ks = 0; ks < K::kBlockN / 16; ++ks) {
    uint32_t a[K::kMTiles][4];
#pragma unroll
    for (int mi = 0; mi < K::kMTiles; ++mi) {
      ldmatrix_x4(a[mi], smem_addr(p_smem + (mi * 16 + lane % 16) * K::kPStride + ks * 16 + (lane / 16) * 8));
    }
    const int key = ks * 16 + lane % 8 + ((lane / 8) % 2) * 8;
#pragma unroll
    for (int ni = 0; ni < K::kNTilesO; ni += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, smem_addr(k_smem + swizzle<K::kD>(key, col_base + ni * 8 + (lane / 16) * 8)));
#pragma unroll
      for (int mi = 0; mi < K::kMTiles; ++mi) {
        mma_16816<T>(o[mi][ni], a[mi], b[0], b[1]);
        mma_16816<T>(o[mi][ni + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

// Keys [k_lo, k_hi) of the tile (key0 = its first key) are masked for some
// row of the CTA (s_q > 1: a query token does not see the tokens after it).
// A masked key must contribute nothing, but P = 0 times a NaN or inf value
// is NaN in the tensor-core product, so their non-finite elements are zeroed
// in the tile, after S = Q K^T has seen them. Returns the first key that had
// one (INT_MAX if none): a row that may see that key is made NaN by the
// caller, as the math makes it. `flag` is one int of shared memory.
// Every thread of the CTA must call this (it has barriers).
template <class K>
__device__ __forceinline__ int sanitize_masked_keys(typename K::T* tile, int key0, int k_lo, int k_hi, int* flag) {
  using T = typename K::T;
  if (threadIdx.x == 0) *flag = INT_MAX;
  __syncthreads();
  for (int idx = threadIdx.x; idx < (k_hi - k_lo) * K::kL; idx += K::kThreads) {
    const int key = k_lo + idx / K::kL, col = idx % K::kL;
    T& x = tile[swizzle<K::kD>(key - key0, col & ~7) + (col & 7)];
    if (!isfinite(static_cast<float>(x))) {
      x = T(0.f);
      atomicMin(flag, key);
    }
  }
  __syncthreads();
  const int first = *flag;
  __syncthreads();  // `flag` lives in the reduction buffer the next stage writes
  return first;
}

}  // namespace lattn::cuda::sm80
