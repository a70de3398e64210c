// src/cuda/sm90/decode/km16_kernel.cuh — the key-major Hopper decode kernel
// for a 16-bit latent cache (km16_traits.h: shape and why; km16_mainloop.cuh:
// the steps). Grid (m_tiles, num_parts) of the split-KV plan with 16-row
// tiles, 384 threads: consumer warpgroups 0 and 1 take the piece's tiles in
// turn (tile it of the CTA's walk goes to warpgroup it % 2, whose stage it
// is), the producer warpgroup's first thread keeps the two stages full (TMA
// through the block table, decode_producer.cuh). At the end of a piece the
// two warpgroups' states are merged and warpgroup 0 writes O and the LSE
// (the output, or the f32 partial slot for decode_combine when split). The
// roles and the walk are the fp8 kernel's too (keymajor_walk.cuh); the
// tile's steps and the stores are this kernel's.
//
// sm_90a only: the body compiles to nothing for other targets.
#pragma once

#include "cuda/common/grid_dependency.cuh"
#include "cuda/sm80/mma.cuh"  // pack2
#include "cuda/sm90/common/cta_smem.cuh"
#include "cuda/sm90/decode/fp8_mainloop.cuh"  // fp8_softmax_tile, Fp8SoftmaxState, barrier ids
#include "cuda/sm90/decode/keymajor_merge.cuh"
#include "cuda/sm90/decode/keymajor_walk.cuh"
#include "cuda/sm90/decode/km16_mainloop.cuh"
#include "cuda/smxx/decode_pieces.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LATTN_SM90_KM16_DECODE_BODY 1
#endif

namespace lattn::cuda::sm90 {

// Warpgroup 0 alone (its output stores), beside the fp8 kernel's ids 1..5.
constexpr int kKm16BarOut = 6;

// Warpgroup 0 stores the piece's merged O^T and LSE (keymajor_consume's
// store) through shared memory: O as [16 rows][kOutStride] in `merge` (once
// every thread has read its part of warpgroup 1's O^T there), so that each
// row is stored with 16-byte writes, and the LSE in stat + kRows.
template <class K>
__device__ __forceinline__ void km16_store_o(const DecodeParams& p, const DecodeRequestView& pv,
                                             const float (&o)[K::kOBlocks][8], const float (&lse)[4], int slot,
                                             float* stat, float* merge) {
  using T = typename K::T;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32, gid = lane / 4, t = lane % 4;
  const int tid = threadIdx.x % 128;
  float* lse_s = stat + K::kRows;
  if (w == 0 && gid == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) lse_s[keymajor_row(i, t)] = lse[i];
  }
  named_barrier_sync(kKm16BarOut, 128);  // every thread has read its part of warpgroup 1's O^T
#pragma unroll
  for (int mb = 0; mb < K::kOBlocks; ++mb) {
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int n = 8 * (r / 4) + 2 * t + (r % 2), col = 64 * mb + 16 * w + gid + 8 * ((r / 2) % 2);
      merge[n * K::kOutStride + col] = o[mb][r];
    }
  }
  named_barrier_sync(kKm16BarOut, 128);  // the merged O (and the LSE) in shared memory
  const int rows = min(K::kRows, pv.rows - pv.row0);
  if (slot < 0) {
    // Rows of 512 16-bit outputs: 64 chunks of 8 per row.
    for (int c = tid; c < rows * (K::kL / 8); c += 128) {
      const int n = c / (K::kL / 8), col = (c % (K::kL / 8)) * 8, gr = pv.row0 + n;
      const float4 a = *reinterpret_cast<const float4*>(merge + n * K::kOutStride + col);
      const float4 b = *reinterpret_cast<const float4*>(merge + n * K::kOutStride + col + 4);
      const int j = gr / p.num_heads, h = gr % p.num_heads;
      T* out = static_cast<T*>(p.out) + (pv.q0 + j) * p.out_stride_t + h * p.out_stride_h + col;
      *reinterpret_cast<uint4*>(out) = make_uint4(sm80::pack2<T>(a.x, a.y), sm80::pack2<T>(a.z, a.w),
                                                  sm80::pack2<T>(b.x, b.y), sm80::pack2<T>(b.z, b.w));
    }
    if (p.lse && tid < rows) {
      const int gr = pv.row0 + tid, j = gr / p.num_heads, h = gr % p.num_heads;
      p.lse[h * p.lse_stride_h + int64_t(pv.q0 + j) * p.lse_stride_t] = lse_s[tid];
    }
  } else {
    for (int c = tid; c < rows * (K::kL / 4); c += 128) {
      const int n = c / (K::kL / 4), col = (c % (K::kL / 4)) * 4, gr = pv.row0 + n;
      *reinterpret_cast<float4*>(p.plan.partial_o + (int64_t(slot) * p.plan.rows_capacity + gr) * K::kL + col) =
          *reinterpret_cast<const float4*>(merge + n * K::kOutStride + col);
    }
    if (tid < rows) p.plan.partial_lse[int64_t(slot) * p.plan.rows_capacity + pv.row0 + tid] = lse_s[tid];
  }
}

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1)
    mla_decode_sm90_km16_kernel(const __grid_constant__ DecodeParams p, const __grid_constant__ CUtensorMap cache_map,
                                CacheHint kv_hint) {
#ifdef LATTN_SM90_KM16_DECODE_BODY
  using T = typename K::T;
  extern __shared__ uint8_t smem_raw[];
  const CtaSmem<K> smem(smem_raw);
  int* bad_key = smem.template at<int>(K::kBadKeyOffset);  // [wg][parity of the warpgroup's tiles]
  // full: the producer's arrive.expect_tx; empty: every warp of the warpgroup that consumed the tile.
  smem.init_ring(1, 4);
  // Launched as a programmatic dependent (batch 1: the plan kernel's launch
  // overlaps this one's): nothing in global memory is read before the plan
  // kernel (and so every kernel before it) has completed. The combine kernel
  // after this one may start now; it waits for this one's end the same way.
  grid_dependency_wait();
  grid_dependency_trigger();
  keymajor_roles<K>(
      p, &cache_map, kv_hint, smem, [&](const DecodeRequestView& pv) { km16_load_q<K>(p, pv, smem.q); },
      [&](int) { return p.scale_log2; },
      [&](const DecodeRequestView& pv, const KeymajorTile& tl, KeymajorPiece<K>& s) {
        // Keys only some rows may see lie in this tile: the flag of this
        // warpgroup's tile parity was last read two of its tiles ago.
        const bool sanitize = tl.fix && s.mask_from < pv.seq_len;
        int* bad = &bad_key[2 * tl.g + ((tl.it / 2) & 1)];
        if (sanitize && threadIdx.x % 128 == 0) *bad = INT_MAX;
        mbarrier_wait(&smem.full[tl.stage], tl.phase);
        float sc[8];
        km16_compute_qk<K>(smem.q, tl.kv, sc);
        float alpha[4];
        fp8_softmax_tile<K, T, false>(sc, s.st, tl.key0, tl.fix, s.key_limit, s.rsc, tl.g, smem.row_max, tl.p_box,
                                      alpha);
        if (tl.fix) km16_clean_v<K>(tl.kv, tl.key0, s.mask_from, pv.seq_len, bad);
        named_barrier_sync(kFp8BarP + tl.g, 128);  // the warpgroup's P written, V cleaned (and fenced)
        if (sanitize) {
          const int first_bad = *bad;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (first_bad < s.key_limit[i]) s.st.l[i] = NAN;  // this row sees a non-finite value: NaN, as the math
          }
        }
        km16_compute_pv<K>(tl.p_box, tl.kv, s.o, alpha);
        mbarrier_arrive_per_warp(&smem.empty[tl.stage]);  // this warp's wgmmas have read the stage
      },
      [&](const DecodeRequestView& pv, const float(&o)[K::kOBlocks][8], const float(&lse)[4], int slot) {
        km16_store_o<K>(p, pv, o, lse, slot, smem.template at<float>(K::kStatOffset),
                        smem.template at<float>(K::kMergeOffset));
      });
#endif
}

}  // namespace lattn::cuda::sm90
