// src/cuda/sm90/decode/fp8_kernel.cuh — the key-major Hopper decode kernel
// for an fp8 e4m3 latent cache (fp8_traits.h: shape and why; fp8_mainloop.cuh:
// the steps). Grid (m_tiles, num_parts) of the split-KV plan with 16-row
// tiles, 384 threads: consumer warpgroups 0 and 1 take the piece's tiles in
// turn (tile it of the CTA's walk goes to warpgroup it % 2), the producer
// warpgroup's first thread keeps a ring of 4 fp8 tiles full (TMA through the
// block table). At the end of a piece the two warpgroups' states are merged
// and warpgroup 0 writes O and the LSE (the output, or the f32 partial slot
// for decode_combine when the request is split). The roles and the walk are
// the 16-bit key-major kernel's too (keymajor_walk.cuh); the tile's steps
// and the stores are this kernel's.
//
// sm_90a only: the body compiles to nothing for other targets.
#pragma once

#include "cuda/sm90/common/cta_smem.cuh"
#include "cuda/sm90/decode/fp8_mainloop.cuh"
#include "cuda/sm90/decode/keymajor_merge.cuh"
#include "cuda/sm90/decode/keymajor_walk.cuh"
#include "cuda/smxx/decode_pieces.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LATTN_SM90_FP8_DECODE_BODY 1
#endif

namespace lattn::cuda::sm90 {

// Warpgroup 0 stores the piece's merged O^T and LSE (keymajor_consume's
// store): thread (w, gid) its 16 contiguous columns of each of its 4 rows.
template <class K>
__device__ __forceinline__ void fp8_store_o(const DecodeParams& p, const DecodeRequestView& pv,
                                            const float (&o)[K::kOBlocks][8], const float (&lse)[4], int slot) {
  using T = typename K::T;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32, gid = lane / 4, t = lane % 4;
  const int col0 = 128 * w + 16 * gid;
  const bool lse_writer = threadIdx.x % 128 < 4;  // warp 0, gid 0: one thread per row
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int n = keymajor_row(i, t), gr = pv.row0 + n;
    if (gr >= pv.rows) continue;
    const int jn = i / 2, e = i % 2;
    // Column col0 + c (c = 2mb + hh) of this row is o[mb][4jn + 2hh + e].
    float v[16];
#pragma unroll
    for (int c = 0; c < 16; ++c) v[c] = o[c / 2][4 * jn + 2 * (c % 2) + e];
    if (slot < 0) {
      const int j = gr / p.num_heads, h = gr % p.num_heads;
      T* out = static_cast<T*>(p.out) + (pv.q0 + j) * p.out_stride_t + h * p.out_stride_h + col0;
#pragma unroll
      for (int c = 0; c < 16; c += 2) *reinterpret_cast<uint32_t*>(out + c) = sm80::pack2<T>(v[c], v[c + 1]);
      if (p.lse && lse_writer) p.lse[h * p.lse_stride_h + int64_t(pv.q0 + j) * p.lse_stride_t] = lse[i];
    } else {
      float* out = p.plan.partial_o + (int64_t(slot) * p.plan.rows_capacity + gr) * K::kL + col0;
#pragma unroll
      for (int c = 0; c < 16; c += 4)
        *reinterpret_cast<float4*>(out + c) = make_float4(v[c], v[c + 1], v[c + 2], v[c + 3]);
      if (lse_writer) p.plan.partial_lse[int64_t(slot) * p.plan.rows_capacity + gr] = lse[i];
    }
  }
}

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1)
    mla_decode_sm90_fp8_kernel(const __grid_constant__ DecodeParams p, const __grid_constant__ CUtensorMap cache_map,
                               CacheHint kv_hint) {
#ifdef LATTN_SM90_FP8_DECODE_BODY
  extern __shared__ uint8_t smem_raw[];
  const CtaSmem<K> smem(smem_raw);
  float* row_scale = smem.template at<float>(K::kRowScaleOffset);
  // full: the producer's arrive.expect_tx; empty: every warp of the warpgroup that consumed the tile.
  smem.init_ring(1, 4);
  keymajor_roles<K>(
      p, &cache_map, kv_hint, smem, [&](const DecodeRequestView& pv) { fp8_load_q<K>(p, pv, smem.q, row_scale); },
      [&](int n) { return row_scale[n]; },
      [&](const DecodeRequestView& pv, const KeymajorTile& tl, KeymajorPiece<K>& s) {
        mbarrier_wait(&smem.full[tl.stage], tl.phase);
        float sc[8];
        fp8_compute_qk<K>(smem.q, tl.kv, sc);
        float alpha[4];
        fp8_softmax_tile<K>(sc, s.st, tl.key0, tl.fix, s.key_limit, s.rsc, tl.g, smem.row_max, tl.p_box, alpha);
        named_barrier_sync(kFp8BarP + tl.g, 128);  // the warpgroup's P written (and fenced)
        const auto release = [&] { mbarrier_arrive_per_warp(&smem.empty[tl.stage]); };
        if (tl.fix) {
          fp8_compute_pv<K, true>(tl.p_box, tl.kv, s.o, alpha, tl.key0, s.mask_from, pv.seq_len, release);
        } else {
          fp8_compute_pv<K, false>(tl.p_box, tl.kv, s.o, alpha, tl.key0, s.mask_from, pv.seq_len, release);
        }
      },
      [&](const DecodeRequestView& pv, const float(&o)[K::kOBlocks][8], const float(&lse)[4], int slot) {
        fp8_store_o<K>(p, pv, o, lse, slot);
      });
#endif
}

}  // namespace lattn::cuda::sm90
