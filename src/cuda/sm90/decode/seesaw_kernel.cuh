// src/cuda/sm90/decode/seesaw_kernel.cuh — the "seesaw" Hopper absorbed-MLA
// decode kernel (the schedule FlashMLA describes publicly; our own code on
// our wrappers). Grid (m_tiles, num_parts) of the split-KV plan, 384 threads:
// two consumer warpgroups and a producer warpgroup (one thread issues the
// copies). seesaw_traits.h has the shape, seesaw_steps.cuh the steps.
//
// Per pair of 64-key tiles (A in stage 0 for warpgroup 0, B in stage 1 for
// warpgroup 1), with m the running row max both warpgroups share:
//   WG0: S_A = Q K_A^T; m_A = max(m, rowmax S_A); O_L, l_0 *= 2^(m - m_A);
//        P_A = 2^(S_A - m_A)                           -> publish m_A
//        O_L += P_A V_A[:, :256]    (RS: P_A in registers; tensor cores busy
//                                    while WG1 runs its softmax)
//   WG1: S_B = Q K_B^T (runs while WG0 does its softmax); wait for m_A;
//        m_B = max(m_A, rowmax S_B); O_R, l_1 *= 2^(m - m_B);
//        P_B = 2^(S_B - m_B) into B's k_pe box           -> publish m_B, P_B
//   WG0: P_A' = P_A 2^(m_A - m_B) into A's k_pe box      -> publish P_A'
//        O_L, l_0 *= 2^(m_A - m_B); O_L += P_B V_B[:, :256]   (SS)
//   WG1: O_R += P_A' V_A[:, 256:]   (SS), O_R += P_B V_B[:, 256:]   (RS)
//   both: m = m_B.
// The row max is chained WG0 -> WG1 -> WG0, so both halves of O use the same
// one and the row sums l_0 + l_1 add up at the end. The k_pe box of a tile is
// dead once its S is done, so P needs no buffer of its own. Tile A is read
// last by each warpgroup's first P V, so its stage is released (and refilled
// by the producer) while the products over tile B still run. An odd tile
// count ends with a lone tile A: WG1 has no S and m_B = m_A.
//
// sm_90a only: the body compiles to nothing for other targets.
#pragma once

#include <climits>

#include "cuda/sm90/decode/decode_epilogue.cuh"
#include "cuda/sm90/decode/decode_kernel.cuh"  // for_each_piece, LATTN_SM90_DECODE_BODY
#include "cuda/sm90/decode/seesaw_steps.cuh"

namespace lattn::cuda::sm90 {

// Named barriers of the seesaw (decode_mainloop.cuh has 1..3; kBarConsumers
// is shared): the row max after tile A (WG0 -> WG1), the row max and P after
// tile B (WG1 -> WG0), the rescaled P_A (WG0 -> WG1), one per warpgroup
// (7, 8), and "S_A done" (WG0 -> WG1, kGateSB only).
//
// kGateSB: WG1 issues S_B only once WG0's S_A is complete, so that the two
// products do not share the tensor cores and end together (which would put
// both softmaxes at the same time, with nothing for the tensor cores);
// without it both S are issued as soon as their tiles land.
enum SeesawBarrier : int { kBarMaxA = 4, kBarMaxB = 5, kBarPA = 6, kBarWarpgroup0 = 7, kBarSADone = 9 };

// Producer (lane 0 of one producer warp): walks the pieces of `part` and
// keeps release group kGroup of stage kStage filled: tiles tile_begin +
// kStage, +2, ... of each piece (stage 0 holds tile A of each pair, stage 1
// tile B), waiting for the group's `empty` barrier before each refill. `kv`:
// the shared address of stage 0; `bars`: of full[0][0] (empty follows full).
template <class K, int kStage, int kGroup>
__device__ __forceinline__ void seesaw_produce(const DecodeParams& p, const CUtensorMap* cache_map, int part,
                                               uint32_t kv, uint32_t bars, CacheHint hint) {
  const uint32_t dst = kv + kStage * uint32_t(K::kKVTileBytes);
  const uint32_t full = bars + 8 * kStage * K::kBoxes;
  const uint32_t empty = bars + 8 * (K::kStages * K::kBoxes + kStage * K::kGroups + kGroup);
  int uses = 0;  // tiles loaded into this stage so far
  for_each_piece<K>(p, part, [&](const PieceView& pv, int tile_begin, int tile_end, int) {
    for (int t = tile_begin + kStage; t < tile_end; t += 2, ++uses) {
      if (uses > 0) mbarrier_wait(empty, (uses - 1) & 1);
      seesaw_load_group<K>(cache_map, seesaw_tile_source(p, pv, t, K::kBlockN), kStage, kGroup, dst, full, hint);
    }
  });
}

template <class K, bool kGateSB>
__global__ void __launch_bounds__(K::kThreads, 1)
    mla_decode_sm90_seesaw_kernel(const __grid_constant__ DecodeParams p,
                                  const __grid_constant__ CUtensorMap cache_map, CacheHint kv_hint) {
#ifdef LATTN_SM90_DECODE_BODY
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* q_smem = smem + K::kQOffset;
  uint8_t* tile_a = smem + K::kKVOffset;
  uint8_t* tile_b = tile_a + K::kKVTileBytes;
  float* row_max = reinterpret_cast<float*>(smem + K::kRowMaxOffset);  // [parity][0]: m_A, [parity][64]: m_B
  float* row_sum = reinterpret_cast<float*>(smem + K::kRowSumOffset);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + K::kBarrierOffset);  // [stage][box]
  uint64_t* empty = full + K::kStages * K::kBoxes;                         // [stage][group]
  int* bad_key = reinterpret_cast<int*>(smem + K::kBadKeyOffset);          // [warpgroup]
  const int part = blockIdx.y;

  if (threadIdx.x == 0) {
    for (int i = 0; i < K::kStages * K::kBoxes; ++i) mbarrier_init(&full[i], 1);  // the producer's arrive.expect_tx
    // Group g of each stage is released by the 128 threads of warpgroup g.
    for (int i = 0; i < K::kStages * K::kGroups; ++i) mbarrier_init(&empty[i], 128);
    fence_barrier_init();
  }
  __syncthreads();

  if (threadIdx.x >= K::kConsumerThreads) {
    // ---- producer warpgroup: lane 0 of warp 2s + g loads group g of stage s ----
    // Four independent copy streams: each half-stage is refilled as soon as
    // its own readers release it, whatever the other halves wait for.
    setmaxnreg_dec<K::kProducerRegs>();
    const int pw = (int(threadIdx.x) - K::kConsumerThreads) / 32;
    if (threadIdx.x % 32 != 0 || pw >= K::kStages * K::kGroups) return;
    tma_prefetch_descriptor(&cache_map);
    const uint32_t kv = smem_u32(tile_a), bars = smem_u32(full);
    // Stage and group as constants: the producer has 24 registers.
    if (pw == 0) seesaw_produce<K, 0, 0>(p, &cache_map, part, kv, bars, kv_hint);
    if (pw == 1) seesaw_produce<K, 0, 1>(p, &cache_map, part, kv, bars, kv_hint);
    if (pw == 2) seesaw_produce<K, 1, 0>(p, &cache_map, part, kv, bars, kv_hint);
    if (pw == 3) seesaw_produce<K, 1, 1>(p, &cache_map, part, kv, bars, kv_hint);
    return;
  }

  // ---- consumer warpgroups ----
  setmaxnreg_inc<K::kConsumerRegs>();
  const int g = warpgroup_index();
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
  uint8_t* p_box_a = tile_a + K::kPeBox * K::kBlockN * 128;
  uint8_t* p_box_b = tile_b + K::kPeBox * K::kBlockN * 128;
  int uses[K::kStages] = {0, 0};  // tiles consumed from each stage so far
  int pairs = 0;                  // pairs done (all pieces): the parity of the row-max slots
  for_each_piece<K>(p, part, [&](const PieceView& pv, int tile_begin, int tile_end, int slot) {
    // The previous piece's wgmmas are complete (waited) in both warpgroups
    // before anyone overwrites Q.
    named_barrier_sync(kBarConsumers, K::kConsumerThreads);
    load_q<K>(p, pv, q_smem);
    named_barrier_sync(kBarConsumers, K::kConsumerThreads);

    int key_limit[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int gr = pv.row0 + r0 + 8 * i;
      key_limit[i] = gr < pv.rows ? pv.seq_len - pv.s_q + gr / p.num_heads + 1 : pv.seq_len;
    }
    const int mask_from = pv.seq_len - pv.s_q + 1;  // tiles reaching past it need masking

    SoftmaxState st{{-INFINITY, -INFINITY}, {0.f, 0.f}};
    float o[K::kColsPerWarpgroup / 2];
#pragma unroll
    for (int i = 0; i < K::kColsPerWarpgroup / 2; ++i) o[i] = 0.f;

    for (int t = tile_begin; t < tile_end; t += 2, ++pairs) {
      const bool has_b = t + 1 < tile_end;
      const uint32_t parity_a = uses[0] & 1, parity_b = uses[1] & 1;
      ++uses[0];
      if (has_b) ++uses[1];
      float* m_slot = row_max + (pairs & 1) * 2 * K::kBlockM;  // [0]: m_A, [64]: m_B
      float s[K::kBlockN / 2];
      uint32_t pa[K::kBlockN / 16][4];
      if (g == 0) {
        // ---- warpgroup 0: tile A, O_L ----
        const int key0 = t * K::kBlockN;
        seesaw_qk<K>(q_smem, tile_a, full, parity_a, s);
        if constexpr (kGateSB) named_barrier_arrive(kBarSADone, K::kConsumerThreads);
        if (key0 + K::kBlockN > pv.seq_len) seesaw_zero_tail<K>(tile_a, pv.seq_len - key0, kBarWarpgroup0);
        int first_bad = INT_MAX;
        if (mask_from < pv.seq_len && key0 + K::kBlockN > mask_from) {
          first_bad = seesaw_sanitize<K>(tile_a, key0, max(key0, mask_from), min(key0 + K::kBlockN, pv.seq_len),
                                         &bad_key[0], kBarWarpgroup0);
        }
        float mx[2], m_a[2], alpha[2], sum[2];
        seesaw_scores<K>(s, key0, key0 + K::kBlockN > mask_from, key_limit, p.scale_log2, mx);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          m_a[i] = fmaxf(st.m[i], mx[i]);
          alpha[i] = softmax_rescale(st.m[i], m_a[i]);
        }
        seesaw_exp<K>(s, m_a, sum);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          st.l[i] = st.l[i] * alpha[i] + sum[i];
          if (first_bad < key_limit[i]) st.l[i] = NAN;  // this row sees a non-finite value: NaN, as the math
        }
        seesaw_scale_o<K>(o, alpha);
        if (lane % 4 == 0) {
          m_slot[r0] = m_a[0];
          m_slot[r0 + 8] = m_a[1];
        }
        named_barrier_arrive(kBarMaxA, K::kConsumerThreads);
        seesaw_pack_p<K>(s, pa);
        seesaw_pv_rs<K>(o, pa, tile_a, 0);  // O_L += P_A V_A[:, :256], in flight during what follows
        named_barrier_sync(kBarMaxB, K::kConsumerThreads);  // m_B and P_B are published
        float m_b[2], beta[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          m_b[i] = m_slot[K::kBlockM + r0 + 8 * i];
          beta[i] = softmax_rescale(m_a[i], m_b[i]);
          st.l[i] *= beta[i];
          st.m[i] = m_b[i];
        }
        seesaw_store_p<K>(s, beta, p_box_a);
        named_barrier_arrive(kBarPA, K::kConsumerThreads);
        wgmma_wait_group<0>();
        fence_operands(o);
#pragma unroll
        for (int kk = 0; kk < K::kBlockN / 16; ++kk)
#pragma unroll
          for (int r = 0; r < 4; ++r) fence_operand(pa[kk][r]);  // P_A's registers stay until the RS wgmma is done
        mbarrier_arrive(&empty[0 * K::kGroups + 0]);  // A's left V half is dead: the producer refills it now
        seesaw_scale_o<K>(o, beta);
        if (has_b) {
          seesaw_pv_ss<K>(o, p_box_b, tile_b, 0);  // O_L += P_B V_B[:, :256]
          wgmma_wait_group<0>();
          fence_operands(o);
          mbarrier_arrive(&empty[1 * K::kGroups + 0]);  // B's left V half and its P box
        }
      } else {
        // ---- warpgroup 1: tile B, O_R ----
        const int key0 = (t + 1) * K::kBlockN;
        float mx[2] = {-INFINITY, -INFINITY};
        int first_bad = INT_MAX;
        if constexpr (kGateSB) named_barrier_sync(kBarSADone, K::kConsumerThreads);
        if (has_b) {
          seesaw_qk<K>(q_smem, tile_b, full + K::kBoxes, parity_b, s);
          if (key0 + K::kBlockN > pv.seq_len) seesaw_zero_tail<K>(tile_b, pv.seq_len - key0, kBarWarpgroup0 + 1);
          if (mask_from < pv.seq_len && key0 + K::kBlockN > mask_from) {
            first_bad = seesaw_sanitize<K>(tile_b, key0, max(key0, mask_from), min(key0 + K::kBlockN, pv.seq_len),
                                           &bad_key[1], kBarWarpgroup0 + 1);
          }
          seesaw_scores<K>(s, key0, key0 + K::kBlockN > mask_from, key_limit, p.scale_log2, mx);
        }
        named_barrier_sync(kBarMaxA, K::kConsumerThreads);
        float m_b[2], alpha[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          m_b[i] = fmaxf(m_slot[r0 + 8 * i], mx[i]);  // m_A >= m already
          alpha[i] = softmax_rescale(st.m[i], m_b[i]);
          st.l[i] *= alpha[i];
          st.m[i] = m_b[i];
        }
        seesaw_scale_o<K>(o, alpha);
        if (has_b) {
          float sum[2];
          seesaw_exp<K>(s, m_b, sum);
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            st.l[i] += sum[i];
            if (first_bad < key_limit[i]) st.l[i] = NAN;  // this row sees a non-finite value: NaN, as the math
          }
          const float one[2] = {1.f, 1.f};
          seesaw_store_p<K>(s, one, p_box_b);
          seesaw_pack_p<K>(s, pa);
        }
        if (lane % 4 == 0) {
          m_slot[K::kBlockM + r0] = m_b[0];
          m_slot[K::kBlockM + r0 + 8] = m_b[1];
        }
        // A full rendezvous (warpgroup 0 is already waiting here): it also
        // orders warpgroup 1's read of m_A before warpgroup 0's next write.
        named_barrier_sync(kBarMaxB, K::kConsumerThreads);
        named_barrier_sync(kBarPA, K::kConsumerThreads);  // P_A' is in A's k_pe box
        seesaw_pv_ss<K>(o, p_box_a, tile_a, 1);           // O_R += P_A' V_A[:, 256:]
        if (has_b) {
          seesaw_pv_rs<K>(o, pa, tile_b, 1);  // O_R += P_B V_B[:, 256:]
          wgmma_wait_group<1>();
          mbarrier_arrive(&empty[0 * K::kGroups + 1]);  // A's right V half and its P box
          wgmma_wait_group<0>();
          fence_operands(o);
#pragma unroll
          for (int kk = 0; kk < K::kBlockN / 16; ++kk)
#pragma unroll
            for (int r = 0; r < 4; ++r) fence_operand(pa[kk][r]);
          mbarrier_arrive(&empty[1 * K::kGroups + 1]);  // B's right V half
        } else {
          wgmma_wait_group<0>();
          fence_operands(o);
          mbarrier_arrive(&empty[0 * K::kGroups + 1]);
        }
      }
    }
    write_o<K>(p, pv, st, o, slot, g, row_sum);
  });
#endif
}

}  // namespace lattn::cuda::sm90
