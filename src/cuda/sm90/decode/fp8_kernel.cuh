// src/cuda/sm90/decode/fp8_kernel.cuh — the key-major Hopper decode kernel
// for an fp8 e4m3 latent cache (fp8_traits.h: shape and why; fp8_mainloop.cuh:
// the steps). Grid (m_tiles, num_parts) of the split-KV plan with 16-row
// tiles, 384 threads: consumer warpgroups 0 and 1 take the piece's tiles in
// turn (tile it of the CTA's walk goes to warpgroup it % 2), the producer
// warpgroup's first thread keeps a ring of 4 fp8 tiles full (TMA through the
// block table). At the end of a piece the two warpgroups' states are merged
// and warpgroup 0 writes O and the LSE (the output, or the f32 partial slot
// for decode_combine when the request is split).
//
// sm_90a only: the body compiles to nothing for other targets.
#pragma once

#include "cuda/sm90/common/cta_smem.cuh"
#include "cuda/sm90/decode/decode_producer.cuh"
#include "cuda/sm90/decode/fp8_mainloop.cuh"
#include "cuda/smxx/decode_pieces.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LATTN_SM90_FP8_DECODE_BODY 1
#endif

namespace lattn::cuda::sm90 {

// Merges warpgroup 1's state into warpgroup 0's and writes the piece's
// result (warpgroup 0 only; both warpgroups call it).
template <class K>
__device__ __forceinline__ void fp8_write_o(const DecodeParams& p, const DecodeRequestView& pv,
                                            const Fp8SoftmaxState& st, float (&o)[K::kOBlocks][8], int slot, int g,
                                            float* row_sum, float* stat, float* merge) {
  using T = typename K::T;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32, gid = lane / 4, t = lane % 4;
  const int tid = threadIdx.x % 128;
  float l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    l[i] = st.l[i];
#pragma unroll
    for (int off = 4; off < 32; off *= 2) l[i] += __shfl_xor_sync(0xffffffffu, l[i], off);
  }
  if (gid == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int n = 8 * (i / 2) + 2 * t + (i % 2);
      row_sum[(g * 4 + w) * K::kRows + n] = l[i];
      if (g == 1 && w == 0) stat[n] = st.m[i];
    }
  }
  if (g == 1) {
#pragma unroll
    for (int mb = 0; mb < K::kOBlocks; ++mb) {
#pragma unroll
      for (int r = 0; r < 8; ++r) merge[(mb * 8 + r) * 128 + tid] = o[mb][r];
    }
  }
  named_barrier_sync(kFp8BarAll, K::kConsumerThreads);
  if (g == 1) return;
  float f0[4], f1[4], inv[4], lse[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int n = 8 * (i / 2) + 2 * t + (i % 2);
    float l0 = 0.f, l1 = 0.f;
#pragma unroll
    for (int ww = 0; ww < 4; ++ww) {
      l0 += row_sum[ww * K::kRows + n];
      l1 += row_sum[(4 + ww) * K::kRows + n];
    }
    const float m0 = st.m[i], m1 = stat[n];
    const float mm = fmaxf(m0, m1);
    const float base = mm == -INFINITY ? 0.f : mm;
    f0[i] = exp2f(m0 - base);
    f1[i] = exp2f(m1 - base);
    const float total = l0 * f0[i] + l1 * f1[i];
    // No key: output 0, LSE -inf. A NaN sum (the row saw a NaN) passes through.
    const bool seen = !(total <= 0.f);
    inv[i] = seen ? p.out_scale / total : 0.f;
    lse[i] = seen ? (base + log2f(total)) * 0.69314718055994531f : -INFINITY;
  }
#pragma unroll
  for (int mb = 0; mb < K::kOBlocks; ++mb) {
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int i = 2 * (r / 4) + (r % 2);
      o[mb][r] = (o[mb][r] * f0[i] + merge[(mb * 8 + r) * 128 + tid] * f1[i]) * inv[i];
    }
  }
  const int col0 = 128 * w + 16 * gid;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int n = 8 * (i / 2) + 2 * t + (i % 2), gr = pv.row0 + n;
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
      if (p.lse && w == 0 && gid == 0) p.lse[h * p.lse_stride_h + int64_t(pv.q0 + j) * p.lse_stride_t] = lse[i];
    } else {
      float* out = p.plan.partial_o + (int64_t(slot) * p.plan.rows_capacity + gr) * K::kL + col0;
#pragma unroll
      for (int c = 0; c < 16; c += 4)
        *reinterpret_cast<float4*>(out + c) = make_float4(v[c], v[c + 1], v[c + 2], v[c + 3]);
      if (w == 0 && gid == 0) p.plan.partial_lse[int64_t(slot) * p.plan.rows_capacity + gr] = lse[i];
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
  uint8_t *const q_smem = smem.q, *const kv_smem = smem.kv;
  float *const row_max = smem.row_max, *const row_sum = smem.row_sum;
  uint64_t *const full = smem.full, *const empty = smem.empty;
  float* merge = smem.template at<float>(K::kMergeOffset);
  float* stat = smem.template at<float>(K::kStatOffset);
  float* row_scale = smem.template at<float>(K::kRowScaleOffset);
  const int part = blockIdx.y;
  // full: the producer's arrive.expect_tx; empty: every thread of the warpgroup that consumed the tile.
  smem.init_ring(1, 128);

  if (threadIdx.x >= K::kConsumerThreads) {
    // ---- producer warpgroup: one thread issues the copies ----
    setmaxnreg_dec<K::kProducerRegs>();
    if (threadIdx.x != K::kConsumerThreads) return;
    tma_prefetch_descriptor(&cache_map);
    producer_walk<K::kRows, K::kBlockN, K::kStages>(p, part, empty, [&](const DecodeRequestView& pv, int tile, int s) {
      producer_load_tile<K::kBlockN, K::kChunks, K::kChunkCols, K::kChunkBytes, K::kTileTxBytes>(
          &cache_map, p, pv, tile, kv_smem + s * K::kTileBytes, &full[s], kv_hint);
    });
    return;
  }

  // ---- consumer warpgroups ----
  setmaxnreg_inc<K::kConsumerRegs>();
  const int g = threadIdx.x / 128;
  const int t = threadIdx.x % 4;
  uint8_t* p_box = smem.p + g * K::kQBoxBytes;
  int it = 0;  // tiles of the walk so far (both warpgroups count all of them)
  for_each_tile_piece<K::kRows>(p, part, K::kBlockN, [&](const auto& pv, int tile_begin, int tile_end, int slot) {
    // The previous piece's products and merge are done in both warpgroups
    // before Q, the scales and the merge buffer are overwritten.
    named_barrier_sync(kFp8BarAll, K::kConsumerThreads);
    fp8_load_q<K>(p, pv, q_smem, row_scale);
    named_barrier_sync(kFp8BarAll, K::kConsumerThreads);

    int key_limit[4];
    float rsc[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int n = 8 * (i / 2) + 2 * t + (i % 2), gr = pv.row0 + n;
      key_limit[i] = gr < pv.rows ? pv.seq_len - pv.s_q + gr / p.num_heads + 1 : pv.seq_len;
      rsc[i] = row_scale[n];
    }
    const int mask_from = pv.seq_len - pv.s_q + 1;  // tiles reaching past it need masking

    Fp8SoftmaxState st{{-INFINITY, -INFINITY, -INFINITY, -INFINITY}, {0.f, 0.f, 0.f, 0.f}};
    float o[K::kOBlocks][8];
#pragma unroll
    for (int mb = 0; mb < K::kOBlocks; ++mb) {
#pragma unroll
      for (int i = 0; i < 8; ++i) o[mb][i] = 0.f;
    }

    for (int tile = tile_begin; tile < tile_end; ++tile, ++it) {
      if (it % 2 != g) continue;
      const int s = it % K::kStages, round = it / K::kStages;
      const uint8_t* kv = kv_smem + s * K::kTileBytes;
      mbarrier_wait(&full[s], round & 1);
      const int key0 = tile * K::kBlockN;
      const bool fix = key0 + K::kBlockN > mask_from;
      float sc[8];
      fp8_compute_qk<K>(q_smem, kv, sc);
      float alpha[4];
      fp8_softmax_tile<K>(sc, st, key0, fix, key_limit, rsc, g, row_max, p_box, alpha);
      named_barrier_sync(kFp8BarP + g, 128);  // the warpgroup's P written (and fenced)
      const auto release = [&] { mbarrier_arrive(&empty[s]); };
      if (fix) {
        fp8_compute_pv<K, true>(p_box, kv, o, alpha, key0, mask_from, pv.seq_len, release);
      } else {
        fp8_compute_pv<K, false>(p_box, kv, o, alpha, key0, mask_from, pv.seq_len, release);
      }
    }
    fp8_write_o<K>(p, pv, st, o, slot, g, row_sum, stat, merge);
  });
#endif
}

}  // namespace lattn::cuda::sm90
