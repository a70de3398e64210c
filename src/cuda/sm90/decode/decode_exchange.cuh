// src/cuda/sm90/decode/decode_exchange.cuh — one KV tile of the Hopper decode
// kernel's "exchange" schedule (docs/hopper.md, "Schedules"): the two
// consumer warpgroups meet once per tile instead of twice.
//
// Warpgroup g computes S for the keys [32g, +32) (compute_qk), its own row
// maxima and P = exp2(S - m_g) relative to its own running max m_g, and
// publishes both: P as f16 in the k_pe rows [32g, +32) of the stage (read by
// nobody else: only g's S read them, and P V reads columns 0..511), the row
// maxima in a small per-stage array. After one named barrier each warpgroup
// reads the other's P of the same rows (thread t of one warpgroup holds the
// same two rows as thread t of the other, so thread t reads its twin's 16
// values), rescales both halves to the common max in registers, and runs
// O += P V with P as the register A operand (wgmma RS form): the P box, the
// P barrier and the cross-warpgroup row-sum exchange of the epilogue are gone
// (each warpgroup's running max and row sum cover all 64 keys of every tile).
//
// Why the exchange is correct with one barrier per tile: the published P and
// maxima live in the stage (maxima: per stage), which the producer refills
// only after both warpgroups' P V of that tile (the `empty` barrier), after
// their reads.
#pragma once

#include <cuda_fp16.h>

#include <climits>
#include <cmath>

#include "cuda/sm90/common/smem.cuh"
#include "cuda/sm90/decode/decode_mainloop.cuh"

namespace lattn::cuda::sm90 {

// The exchange slot of warpgroup g in the KV tile `kv`.
template <class K>
__device__ __forceinline__ uint8_t* exchange_p_slot(uint8_t* kv, int g) {
  return kv + K::kXPOffsetInTile + g * K::kXPBytes;
}

// Like sanitize_masked_keys, for the keys of warpgroup g only (the keys its S
// read, [key0 + 32g, +32) ∩ [k_lo, k_hi)): its 128 threads, after its own
// Q K^T and before the tile's barrier (the other warpgroup reads those V rows
// in P V after it).
template <class K>
__device__ __forceinline__ void sanitize_own_keys(uint8_t* kv, int key0, int k_lo, int k_hi, int g, int* bad_key) {
  using T = typename K::T;
  const int lo = max(k_lo, key0 + g * K::kKeysPerWarpgroup);
  const int hi = min(k_hi, key0 + (g + 1) * K::kKeysPerWarpgroup);
  for (int idx = warpgroup_thread(); idx < (hi - lo) * K::kL; idx += 128) {
    const int key = lo + idx / K::kL, col = idx % K::kL;
    T* x = reinterpret_cast<T*>(kv + (col / K::kBoxCols) * K::kBlockN * 128 +
                                swizzle128_offset(key - key0, col % K::kBoxCols));
    if (!isfinite(static_cast<float>(*x))) {
      *x = T(0.f);
      atomicMin(bad_key, key);
    }
  }
  fence_proxy_async_shared();
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ float2 unpack_half2(uint32_t v) {
  __half2 h;
  memcpy(&h, &v, 4);
  return __half22float2(h);
}

// Before the barrier: scores -> P relative to this warpgroup's running max
// (kept in s, f32), P published as f16 and the row maxima m_pub (the running
// max including this tile's own keys; -inf while the row has seen no key).
template <class K>
__device__ __forceinline__ void exchange_publish(float (&s)[K::kKeysPerWarpgroup / 2], const SoftmaxState& st,
                                                 int key0, bool mask, const int (&key_limit)[2], float scale_log2,
                                                 int g, uint8_t* kv, float* xmax, float (&m_pub)[2]) {
  constexpr int kGroups = K::kKeysPerWarpgroup / 8;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32, t = warpgroup_thread();
  const int r0 = 16 * w + lane / 4;
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = e / 2;
      const int key = key0 + g * K::kKeysPerWarpgroup + 8 * j + 2 * (lane % 4) + (e % 2);
      float x = s[4 * j + e] * scale_log2;
      if (mask && key >= key_limit[i]) x = -INFINITY;
      s[4 * j + e] = x;
      mx[i] = fmaxf(mx[i], x);
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
    m_pub[i] = fmaxf(st.m[i], mx[i]);
    mx[i] = m_pub[i] == -INFINITY ? 0.f : m_pub[i];  // the base: exp2(-inf - 0) = 0
  }
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[4 * j + e] = exp2f(s[4 * j + e] - mx[e / 2]);
  }
  // [k16 step kk][thread t][4 words]: the RS A fragment of keys 16 kk.. of
  // this warpgroup's 32 (16-byte stores, consecutive threads consecutive).
  const uint32_t slot = smem_u32(exchange_p_slot<K>(kv, g));
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const uint4 v = make_uint4(pack_half2(s[8 * kk], s[8 * kk + 1]), pack_half2(s[8 * kk + 2], s[8 * kk + 3]),
                               pack_half2(s[8 * kk + 4], s[8 * kk + 5]), pack_half2(s[8 * kk + 6], s[8 * kk + 7]));
    st_shared_v4(slot + kk * 2048 + t * 16, v);
  }
  if (lane % 4 == 0) {
    xmax[g * K::kBlockM + r0] = m_pub[0];
    xmax[g * K::kBlockM + r0 + 8] = m_pub[1];
  }
  // The slot is overwritten by the next copy into the stage (async proxy).
  fence_proxy_async_shared();
}

// After the barrier: the common max of both halves, the two halves of P
// rescaled to it and packed as the 4 RS A fragments of the tile's 64 keys,
// the running sum and max updated; returns O's rescale factors.
template <class K>
__device__ __forceinline__ void exchange_collect(const float (&s)[K::kKeysPerWarpgroup / 2], SoftmaxState& st,
                                                 const float (&m_pub)[2], int g, uint8_t* kv, const float* xmax,
                                                 uint32_t (&a)[4][4], float (&alpha)[2]) {
  using T = typename K::T;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32, t = warpgroup_thread();
  const int r0 = 16 * w + lane / 4;
  const uint32_t slot = smem_u32(exchange_p_slot<K>(kv, 1 - g));
  uint4 other[2];
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) other[kk] = ld_shared_v4(slot + kk * 2048 + t * 16);
  float f_own[2], f_oth[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float m_oth = xmax[(1 - g) * K::kBlockM + r0 + 8 * i];
    const float m_fin = fmaxf(m_pub[i], m_oth);
    const float base = m_fin == -INFINITY ? 0.f : m_fin;
    // A half whose max is -inf holds only zeros (or NaN from a NaN score,
    // kept by the 0 factor: 0 * NaN = NaN).
    f_own[i] = m_pub[i] == -INFINITY ? 0.f : exp2f(m_pub[i] - base);
    f_oth[i] = m_oth == -INFINITY ? 0.f : exp2f(m_oth - base);
    alpha[i] = exp2f(st.m[i] - base);
    st.m[i] = m_fin;
  }
  float sum[2] = {0.f, 0.f};
  uint32_t own[2][4], oth[2][4];
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const uint32_t ow[4] = {other[kk].x, other[kk].y, other[kk].z, other[kk].w};
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = r % 2;  // words 0, 2: row r0; 1, 3: row r0 + 8
      const float p0 = s[8 * kk + 2 * r] * f_own[i], p1 = s[8 * kk + 2 * r + 1] * f_own[i];
      const float2 q = unpack_half2(ow[r]);
      const float q0 = q.x * f_oth[i], q1 = q.y * f_oth[i];
      sum[i] += (p0 + p1) + (q0 + q1);
      own[kk][r] = sm80::pack2<T>(p0, p1);
      oth[kk][r] = sm80::pack2<T>(q0, q1);
    }
  }
  // Keys [0, 32) are warpgroup 0's, [32, 64) warpgroup 1's (selects, no
  // run-time register indexing).
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      a[kk][r] = g == 0 ? own[kk][r] : oth[kk][r];
      a[2 + kk][r] = g == 0 ? oth[kk][r] : own[kk][r];
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) st.l[i] = st.l[i] * alpha[i] + sum[i];
}

// O[64][256] of warpgroup g = alpha * O + P . V over the tile's 64 keys: 4
// wgmma m64n256k16, P from registers, V MN-major (boxes 4g .. 4g + 3).
template <class K>
__device__ __forceinline__ void compute_pv_rs(const uint8_t* kv, int g, float (&o)[K::kColsPerWarpgroup / 2],
                                              const uint32_t (&a)[4][4], const float (&alpha)[2]) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  constexpr int kVBoxesPerWg = K::kColsPerWarpgroup / K::kBoxCols;
#pragma unroll
  for (int j = 0; j < K::kColsPerWarpgroup / 8; ++j) {
    o[4 * j] *= alpha[0];
    o[4 * j + 1] *= alpha[0];
    o[4 * j + 2] *= alpha[1];
    o[4 * j + 3] *= alpha[1];
  }
  warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
    const uint64_t db =
        make_desc_mnmajor_sw128(kv + g * kVBoxesPerWg * K::kBlockN * 128 + kk * 16 * 128, K::kBlockN * 128);
    wgmma_rs<K::kColsPerWarpgroup, kBf16, 1>(o, a[kk], db, 1);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(o);
}

// One KV tile (keys [key0, +64) in `kv`) of the exchange schedule, for
// warpgroup g; the caller waited for the tile's `full` barrier and releases
// the stage afterwards. bad_key: the masked keys' flags [3], this tile's is
// bad_key[it % 3]; the one of tile it + 2 is reset here, after the barrier
// (its last reader, tile it - 1, is before it; its first writer, tile it + 2,
// after the next tile's barrier).
template <class K>
__device__ __forceinline__ void exchange_tile(const DecodeParams& p, const PieceView& pv, const uint8_t* q_smem,
                                              uint8_t* kv, float* xmax, int g, int key0, int mask_from,
                                              const int (&key_limit)[2], int it, int* bad_key, SoftmaxState& st,
                                              float (&o)[K::kColsPerWarpgroup / 2]) {
  if (key0 + K::kBlockN > pv.seq_len) zero_tail_rows<K>(kv, pv.seq_len - key0, g);
  float sc[K::kKeysPerWarpgroup / 2];
  compute_qk<K>(q_smem, kv, g, sc);
  const bool sanitize = mask_from < pv.seq_len && key0 + K::kBlockN > mask_from;
  if (sanitize) {
    sanitize_own_keys<K>(kv, key0, max(key0, mask_from), min(key0 + K::kBlockN, pv.seq_len), g, &bad_key[it % 3]);
  }
  float m_pub[2];
  exchange_publish<K>(sc, st, key0, key0 + K::kBlockN > mask_from, key_limit, p.scale_log2, g, kv, xmax, m_pub);
  named_barrier_sync(kBarP, K::kConsumerThreads);  // both halves of P and the maxima published
  if (threadIdx.x == 0) bad_key[(it + 2) % 3] = INT_MAX;
  if (sanitize) {
    const int first_bad = bad_key[it % 3];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (first_bad < key_limit[i]) st.l[i] = NAN;  // this row sees a non-finite value: NaN, as the math
    }
  }
  uint32_t a[4][4];
  float alpha[2];
  exchange_collect<K>(sc, st, m_pub, g, kv, xmax, a, alpha);
  compute_pv_rs<K>(kv, g, o, a, alpha);
}

// Issues S[64 rows][32 keys] of warpgroup g = Q . K[32g, +32)^T (compute_qk
// without its commit and wait).
template <class K>
__device__ __forceinline__ void issue_qk(const uint8_t* q_smem, const uint8_t* kv, int g,
                                         float (&s)[K::kKeysPerWarpgroup / 2]) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  warpgroup_arrive();
#pragma unroll
  for (int c = 0; c < K::kBoxes; ++c) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t da = make_desc_kmajor_sw128(q_smem + c * K::kBoxBytes + kk * 32);
      const uint64_t db =
          make_desc_kmajor_sw128(kv + c * K::kBlockN * 128 + g * K::kKeysPerWarpgroup * 128 + kk * 32);
      wgmma_ss<K::kKeysPerWarpgroup, kBf16>(s, da, db, (c | kk) != 0);
    }
  }
}

// The tiles [tile_begin, tile_end) of one piece in the pipelined exchange
// schedule: per tile, P V of the tile and S of the next one are issued back
// to back (the tensor cores go from one to the other without waiting for this
// thread), the stage is released as soon as P V is done, and the next tile's
// softmax starts when its S is. After the piece's last tile an S is issued on
// the next stage anyway, without waiting for it (a branch around a wgmma
// group makes ptxas serialize them) and its result is discarded: whatever
// that stage holds is only read. `it` advances by the piece's tiles.
template <class K>
__device__ __forceinline__ void exchange_piece_pipelined(const DecodeParams& p, const PieceView& pv,
                                                         const uint8_t* q_smem, uint8_t* kv_smem, uint8_t* smem,
                                                         uint64_t* full, uint64_t* empty, int g, int tile_begin,
                                                         int tile_end, int mask_from, const int (&key_limit)[2],
                                                         int& it, int* bad_key, SoftmaxState& st,
                                                         float (&o)[K::kColsPerWarpgroup / 2]) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  constexpr int kVBoxesPerWg = K::kColsPerWarpgroup / K::kBoxCols;
  if (tile_begin >= tile_end) return;
  float sc[K::kKeysPerWarpgroup / 2];
  {
    const int s = it % K::kStages;
    uint8_t* kv = kv_smem + s * K::kKVTileBytes;
    mbarrier_wait(&full[s], (it / K::kStages) & 1);
    const int key0 = tile_begin * K::kBlockN;
    if (key0 + K::kBlockN > pv.seq_len) zero_tail_rows<K>(kv, pv.seq_len - key0, g);
    compute_qk<K>(q_smem, kv, g, sc);
  }
  for (int tile = tile_begin; tile < tile_end; ++tile, ++it) {
    const int s = it % K::kStages;
    uint8_t* kv = kv_smem + s * K::kKVTileBytes;
    float* xmax = reinterpret_cast<float*>(smem + K::kXMaxOffset) + s * 2 * K::kBlockM;
    const int key0 = tile * K::kBlockN;
    const bool sanitize = mask_from < pv.seq_len && key0 + K::kBlockN > mask_from;
    if (sanitize) {
      sanitize_own_keys<K>(kv, key0, max(key0, mask_from), min(key0 + K::kBlockN, pv.seq_len), g, &bad_key[it % 3]);
    }
    float m_pub[2];
    exchange_publish<K>(sc, st, key0, key0 + K::kBlockN > mask_from, key_limit, p.scale_log2, g, kv, xmax, m_pub);
    named_barrier_sync(kBarP, K::kConsumerThreads);  // both halves of P and the maxima published
    if (threadIdx.x == 0) bad_key[(it + 2) % 3] = INT_MAX;
    if (sanitize) {
      const int first_bad = bad_key[it % 3];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (first_bad < key_limit[i]) st.l[i] = NAN;
      }
    }
    uint32_t a[4][4];
    float alpha[2];
    exchange_collect<K>(sc, st, m_pub, g, kv, xmax, a, alpha);
#pragma unroll
    for (int j = 0; j < K::kColsPerWarpgroup / 8; ++j) {
      o[4 * j] *= alpha[0];
      o[4 * j + 1] *= alpha[0];
      o[4 * j + 2] *= alpha[1];
      o[4 * j + 3] *= alpha[1];
    }
    warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
      const uint64_t db =
          make_desc_mnmajor_sw128(kv + g * kVBoxesPerWg * K::kBlockN * 128 + kk * 16 * 128, K::kBlockN * 128);
      wgmma_rs<K::kColsPerWarpgroup, kBf16, 1>(o, a[kk], db, 1);
    }
    wgmma_commit_group();
    // The next tile (its stage was filled while this one was computed).
    const int s2 = (it + 1) % K::kStages;
    uint8_t* kv2 = kv_smem + s2 * K::kKVTileBytes;
    if (tile + 1 < tile_end) {
      mbarrier_wait(&full[s2], ((it + 1) / K::kStages) & 1);
      const int key1 = key0 + K::kBlockN;
      if (key1 + K::kBlockN > pv.seq_len) zero_tail_rows<K>(kv2, pv.seq_len - key1, g);
    }
    issue_qk<K>(q_smem, kv2, g, sc);
    wgmma_commit_group();
    wgmma_wait_group<1>();  // P V done: the stage may be refilled
    fence_operands(o);
    mbarrier_arrive(&empty[s]);
    wgmma_wait_group<0>();
    fence_operands(sc);
  }
}

}  // namespace lattn::cuda::sm90
