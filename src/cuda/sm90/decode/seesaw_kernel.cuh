// src/cuda/sm90/decode/seesaw_kernel.cuh — the "seesaw" Hopper absorbed-MLA
// decode kernel (the schedule FlashMLA describes publicly; our own code on
// our wrappers). Grid (m_tiles, num_parts) of the split-KV plan, 384
// threads: two consumer warpgroups and a producer warpgroup of which four
// threads issue the copies. seesaw_traits.h has the shape, seesaw_steps.cuh
// the steps; docs/hopper.md, "The seesaw", why.
//
// Per pair of 64-key tiles (A in stage 0 for warpgroup 0, B in stage 1 for
// warpgroup 1), with m the running row max both warpgroups hold:
//   WG0: S_A = Q K_A^T; m_A = lazy(m, rowmax S_A); P_A = 2^(S_A - m_A);
//        P_A into A's dead k_pe box, m_A published          -> hand-over A
//        O_L = O_L 2^(m - m_A) + P_A V_A[:, :256]   (RS: P_A in registers)
//   WG1: S_B = Q K_B^T (runs while WG0 does its softmax); after hand-over A:
//        O_R = O_R 2^(m - m_A) + P_A V_A[:, 256:]   (SS, from A's k_pe box);
//        m_B = lazy(m_A, rowmax S_B); P_B = 2^(S_B - m_B) into B's k_pe
//        box, m_B published                                  -> hand-over B
//        O_R = O_R 2^(m_A - m_B) + P_B V_B[:, 256:]   (RS)
//   WG0: after hand-over B: O_L = O_L 2^(m_A - m_B) + P_B V_B[:, :256]  (SS)
//   both: m = m_B.
// With lazy rescaling (lazy_row_max) the factors are 1 in most pairs, so the
// products of a pair follow each other without a wait; a factor != 1 waits
// for the warpgroup's products in flight before it scales O. The row max is
// chained WG0 -> WG1 -> WG0, so both halves of O use the same one and the row
// sums l_0 + l_1 add up at the end. Each stage is released in two halves, by
// the warpgroup that reads each last (seesaw_traits.h), and refilled box by
// box by its own producer thread; S waits for each 64-column box separately.
// Each warpgroup waits for its product over tile A and frees its half of A
// before it issues its product over tile B, so that A's refill starts while
// the pair's last products run (measured 4-5 % faster than freeing A after
// issuing them, docs/perf.md).
// An odd tile count ends with a lone tile A: WG1 has no S and m_B = m_A.
// The walk looks one piece ahead: each warpgroup copies its share of the
// next piece's Q (cp.async) at the end of the piece's last pair, so the copy
// runs under the epilogue instead of in front of the next piece.
//
// The hand-overs are mbarriers (128 arrivals, one per thread of the handing
// warpgroup: each thread's stores of P and m are ordered by its own arrive),
// and the row-max slots alternate by pair, so that a slot is rewritten only
// after the other warpgroup's read of it is ordered by a later hand-over.
//
// sm_90a only: the body compiles to nothing for other targets.
#pragma once

#include <climits>

#include "cuda/sm90/common/cta_smem.cuh"
#include "cuda/sm90/decode/decode_epilogue.cuh"
#include "cuda/sm90/decode/decode_kernel.cuh"    // LATTN_SM90_DECODE_BODY
#include "cuda/sm90/decode/decode_producer.cuh"  // tile_source, wait_to_refill
#include "cuda/sm90/decode/seesaw_steps.cuh"

namespace lattn::cuda::sm90 {

// Named barriers of one warpgroup each (decode_mainloop.cuh has 1..3;
// kBarConsumers is shared): warpgroup g uses kBarSeesawWarpgroup0 + g.
enum SeesawBarrier : int { kBarSeesawWarpgroup0 = 4 };

// Producer (lane 0 of one producer warp): walks the pieces of `part` and
// keeps release group kGroup of stage kStage filled: tiles tile_begin +
// kStage, +2, ... of each piece (stage 0 holds tile A of each pair, stage 1
// tile B), waiting for the group's `empty` barrier before each refill.
template <class K, int kStage, int kGroup>
__device__ __forceinline__ void seesaw_produce(const DecodeParams& p, const CUtensorMap* cache_map, int part,
                                               uint8_t* kv, uint64_t* full, uint64_t* empty, CacheHint hint) {
  uint8_t* const dst = kv + kStage * K::kKVTileBytes;
  uint64_t* const stage_full = full + kStage * K::kBoxes;
  uint64_t* const group_empty = empty + kStage * K::kGroups + kGroup;
  int uses = 0;  // tiles loaded into this stage so far
  for_each_tile_piece<K::kBlockM>(p, part, K::kBlockN,
                                  [&](const DecodeRequestView& v, int tile_begin, int tile_end, int) {
                                    for (int t = tile_begin + kStage; t < tile_end; t += 2, ++uses) {
                                      if (uses > 0) wait_to_refill<K::kBlockN>(p, v, t, group_empty, uses - 1);
                                      seesaw_load_group<K>(cache_map, p, v, t, kStage, kGroup, dst, stage_full, hint);
                                    }
                                  });
}

// fence_operand over P's A fragments: their registers stay untouched until
// the RS wgmma that reads them is complete.
template <int kSteps>
__device__ __forceinline__ void fence_fragments(uint32_t (&a)[kSteps][4]) {
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) fence_operand(a[kk][r]);
  }
}

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1)
    mla_decode_sm90_seesaw_kernel(const __grid_constant__ DecodeParams p, const __grid_constant__ CUtensorMap cache_map,
                                  CacheHint kv_hint) {
#ifdef LATTN_SM90_DECODE_BODY
  extern __shared__ uint8_t smem_raw[];
  const CtaSmem<K> smem(smem_raw);
  uint8_t* const q_smem = smem.q;
  uint8_t* const tile_a = smem.kv;
  uint8_t* const tile_b = smem.kv + K::kKVTileBytes;
  float *const row_max = smem.row_max, *const row_sum = smem.row_sum;
  uint64_t* const full = smem.template at<uint64_t>(K::kBarrierOffset);  // [stage][box]
  uint64_t* const empty = full + K::kStages * K::kBoxes;                 // [stage][group]
  uint64_t* const handed = empty + K::kStages * K::kGroups;              // [0]: after A (WG0 -> 1), [1]: after B
  uint64_t* const sums_met = handed + 2;                                 // the epilogue's row-sum exchange
  int* const bad_key = smem.template at<int>(K::kBadKeyOffset);          // [warpgroup]
  const int part = blockIdx.y;

  if (threadIdx.x == 0) {
    for (int i = 0; i < K::kStages * K::kBoxes; ++i) mbarrier_init(&full[i], 1);  // the producer's arrive.expect_tx
    // A group is released by the 4 warps of the warpgroup that reads it last.
    for (int i = 0; i < K::kStages * K::kGroups; ++i) mbarrier_init(&empty[i], 4);
    for (int i = 0; i < 2; ++i) mbarrier_init(&handed[i], 128);
    mbarrier_init(&sums_met[0], K::kConsumerThreads);
    fence_barrier_init();
  }
  __syncthreads();

  if (threadIdx.x >= K::kConsumerThreads) {
    // ---- producer warpgroup: lane 0 of warp 2s + r loads group r of stage s ----
    // Four independent copy streams: each half-stage is refilled as soon as
    // its own readers release it, whatever the other halves wait for.
    setmaxnreg_dec<K::kProducerRegs>();
    const int pw = (int(threadIdx.x) - K::kConsumerThreads) / 32;
    if (threadIdx.x % 32 != 0) return;
    tma_prefetch_descriptor(&cache_map);
    if (pw == 0) seesaw_produce<K, 0, 0>(p, &cache_map, part, smem.kv, full, empty, kv_hint);
    if (pw == 1) seesaw_produce<K, 0, 1>(p, &cache_map, part, smem.kv, full, empty, kv_hint);
    if (pw == 2) seesaw_produce<K, 1, 0>(p, &cache_map, part, smem.kv, full, empty, kv_hint);
    if (pw == 3) seesaw_produce<K, 1, 1>(p, &cache_map, part, smem.kv, full, empty, kv_hint);
    return;
  }

  // ---- consumer warpgroups ----
  setmaxnreg_inc<K::kConsumerRegs>();
  const int g = warpgroup_index();
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
  uint8_t* const p_box_a = tile_a + K::kPeBox * K::kBlockN * 128;
  uint8_t* const p_box_b = tile_b + K::kPeBox * K::kBlockN * 128;
  uint32_t uses_a = 0, uses_b = 0;      // tiles consumed from each stage so far
  uint32_t handed_a = 0, handed_b = 0;  // hand-overs passed (the first also counts pairs)
  uint32_t pieces = 0;                  // pieces finished: the row-sum slots' parity
  // The walk looks one piece ahead: the next piece's Q is copied (cp.async)
  // at the end of this piece's last pair, when both warpgroups' Q K^T are
  // done, so that the copy runs under this piece's epilogue instead of at
  // the next piece's start (docs/hopper.md, "Q of the next piece, early").
  // Q rows that are not 16-byte aligned are loaded at the piece's start
  // (start_piece).
  const bool q_early = p.q_vec;
  DecodePiece piece{}, next{};
  DecodeRequestView pv{}, next_view{};
  bool more = find_tile_piece<K::kBlockM>(p, part, K::kBlockN, 0, piece, pv);
  if (more && q_early) issue_q_copies<K>(p, pv, q_smem);
  for (; more; piece = next, pv = next_view) {
    const int tile_begin = piece.tile_begin, tile_end = piece.tile_end, slot = piece.slot;
    more = find_tile_piece<K::kBlockM>(p, part, K::kBlockN, piece.r + 1, next, next_view);
    int key_limit[2];
    SoftmaxState st;
    float o[K::kColsPerWarpgroup / 2];
    const int mask_from = start_piece<K>(p, pv, q_smem, key_limit, st, o, q_early);
    const bool copy_next_q = q_early && more;

    for (int t = tile_begin; t < tile_end; t += 2) {
      const bool has_b = t + 1 < tile_end;
      // At the end of the last pair each warpgroup issues its share of the
      // next piece's Q copies: both warpgroups' Q K^T are complete by then
      // (warpgroup 0 passed hand-over B, or had the lone tile A; warpgroup 1
      // passed hand-over A after its own Q K^T). One call site, a loop not
      // unrolled: copies of it inside the pair's branches (under the
      // products in flight) made H128 B128 S16384 2-5 % slower (docs/perf.md).
      const bool q_now = copy_next_q && t + 2 >= tile_end;
      float* const m_slot = row_max + (handed_a & 1) * 2 * K::kBlockM;  // [r]: m_A, [64 + r]: m_B
      float s[K::kBlockN / 2];
      uint32_t pa[K::kBlockN / 16][4];
      if (g == 0) {
        // ---- warpgroup 0: tile A, O_L ----
        const int key0 = t * K::kBlockN;
        seesaw_qk<K, 0>(q_smem, tile_a, &full[0], uses_a & 1, s);
        ++uses_a;
        const int first_bad =
            seesaw_clean_tile<K>(tile_a, key0, pv.seq_len, mask_from, &bad_key[0], kBarSeesawWarpgroup0);
        float mx[2], m_a[2], base[2], alpha[2];
        mask_and_row_max<K::kBlockN / 8>(s, key0, key0 + K::kBlockN > mask_from, key_limit, p.scale_log2, mx);
#pragma unroll
        for (int i = 0; i < 2; ++i) lazy_row_max(st.m[i], mx[i], m_a[i], base[i], alpha[i]);
        seesaw_hand_over<K>(s, base, alpha, first_bad, key_limit, st, pa, m_a, m_slot, p_box_a, &handed[0]);
        ++handed_a;
        scale_o_rows<K::kColsPerWarpgroup>(o, alpha);
        seesaw_pv_rs<K>(o, pa, tile_a, 0);  // O_L += P_A V_A[:, :256]
        // Tile B's hand-over comes after warpgroup 1's softmax: finish
        // P_A V_A meanwhile and free A's left V half at once, so that its
        // refill starts before this pair's last products are issued.
        wgmma_wait_group<0>();
        fence_operands(o);
        fence_fragments(pa);
        mbarrier_arrive_per_warp(&empty[0 * K::kGroups + 0]);  // A's left V half
        if (has_b) {
          mbarrier_wait(&handed[1], handed_b & 1);  // P_B and m_B are published
          ++handed_b;
          float beta[2];
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const float m_b = m_slot[K::kBlockM + r0 + 8 * i];
            beta[i] = lazy_rescale_factor(m_a[i], m_b);
            st.l[i] *= beta[i];
            st.m[i] = m_b;
          }
          scale_o_rows<K::kColsPerWarpgroup>(o, beta);
          seesaw_pv_ss<K>(o, p_box_b, tile_b, 0);  // O_L += P_B V_B[:, :256]
          wgmma_wait_group<0>();
          fence_operands(o);
          mbarrier_arrive_per_warp(&empty[1 * K::kGroups + 0]);  // B's left V half and its P box
        } else {
          st.m[0] = m_a[0];
          st.m[1] = m_a[1];
        }
      } else {
        // ---- warpgroup 1: tile B, O_R ----
        const int key0 = (t + 1) * K::kBlockN;
        float mx[2] = {-INFINITY, -INFINITY};
        int first_bad = INT_MAX;
        if (has_b) {
          seesaw_qk<K, 1>(q_smem, tile_b, &full[K::kBoxes], uses_b & 1, s);
          ++uses_b;
          first_bad = seesaw_clean_tile<K>(tile_b, key0, pv.seq_len, mask_from, &bad_key[1], kBarSeesawWarpgroup0 + 1);
          mask_and_row_max<K::kBlockN / 8>(s, key0, key0 + K::kBlockN > mask_from, key_limit, p.scale_log2, mx);
        }
        mbarrier_wait(&handed[0], handed_a & 1);  // P_A and m_A are published
        ++handed_a;
        float m_b[2], base[2], alpha[2], beta[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float m_a = m_slot[r0 + 8 * i];
          alpha[i] = lazy_rescale_factor(st.m[i], m_a);  // warpgroup 0's alpha, bit for bit
          lazy_row_max(m_a, mx[i], m_b[i], base[i], beta[i]);
          st.l[i] *= alpha[i];
          st.m[i] = m_b[i];
        }
        scale_o_rows<K::kColsPerWarpgroup>(o, alpha);
        seesaw_pv_ss<K>(o, p_box_a, tile_a, 1);  // O_R += P_A V_A[:, 256:], in flight during the softmax
        if (has_b) {
          seesaw_hand_over<K>(s, base, beta, first_bad, key_limit, st, pa, m_b, m_slot + K::kBlockM, p_box_b,
                              &handed[1]);
          ++handed_b;
          wgmma_wait_group<0>();  // P_A V_A done: free A's right half before P_B V_B is issued
          fence_operands(o);
          mbarrier_arrive_per_warp(&empty[0 * K::kGroups + 1]);  // A's right V half and its P box
          scale_o_rows<K::kColsPerWarpgroup>(o, beta);
          seesaw_pv_rs<K>(o, pa, tile_b, 1);  // O_R += P_B V_B[:, 256:]
          wgmma_wait_group<0>();
          fence_operands(o);
          fence_fragments(pa);
          mbarrier_arrive_per_warp(&empty[1 * K::kGroups + 1]);  // B's right V half
        } else {
          wgmma_wait_group<0>();
          fence_operands(o);
          mbarrier_arrive_per_warp(&empty[0 * K::kGroups + 1]);
        }
      }
      if (q_now) issue_q_copies<K>(p, next_view, q_smem);
    }
    // The row sums meet at an mbarrier (every consumer thread arrives), in
    // slots that alternate by piece: with share_row_sums' named barrier
    // compute-sanitizer's racecheck reported the slots as racing in this
    // kernel, for a reason not found (docs/hopper.md, "The seesaw").
    float sums[2];
    share_row_sums_at<K>(st, g, row_sum + (pieces & 1) * 2 * K::kBlockM, sums, [&] {
      mbarrier_arrive(&sums_met[0]);
      mbarrier_wait(&sums_met[0], pieces & 1);
    });
    ++pieces;
    write_o_rows<K>(p, pv, st, o, slot, g, sums);
  }
#endif
}

}  // namespace lattn::cuda::sm90
