// src/cuda/sm90/prefill/prefill_kernel.cuh — the Hopper (sm_90a) varlen
// prefill attention kernel: FlashAttention's online softmax on warpgroup MMAs
// fed by the bulk tensor copy engine (roles and memory map in
// prefill_traits.cuh, the walk over tiles in prefill_tile_scheduler.cuh).
//
// The producer thread walks the tiles (dynamic or static, see the
// scheduler) and names each one to the consumers with its Q. Per tile
// (request, head, 128 query rows), consumer warpgroup wg (64 rows), serial
// variant:
//   wait Q; for key block n = last .. 0 (the diagonal / ragged end first):
//     wait K[n]; S = Q K[n]ᵀ; release K[n] (last block: and Q);
//     mask (only blocks crossing the keys' end or the causal diagonal);
//     online softmax -> P (16-bit, registers); wait V[n]; O += P V[n];
//     release V[n]
//   O / row sum, LSE -> global.
// Overlapped variant (FlashAttention-3's intra-warpgroup pipelining): after
// the first block, each step issues S = Q K[n]ᵀ and then O += P[n+1] V[n+1]
// as two wgmma groups, waits for the first, runs block n's softmax on the
// CUDA cores while the tensor cores finish P V, then rescales O and packs P[n].
// A warpgroup whose rows see none of a block's keys skips its math but still
// waits for the block's copies before releasing the stage, so no warpgroup
// runs ahead of the barrier phases. The V tiles of the diagonal block and of
// the block crossing the keys' end are cleaned by producer warps 1..3 before
// any P V reads them (PrefillMainloop::fix_v; the consumers wait on v_ready
// for those blocks).
//
// The body is compiled for sm_90a only (wgmma, setmaxnreg); other targets
// get an empty kernel that the launcher never starts.
#pragma once

#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/sm90/common/mbarrier.cuh"
#include "cuda/sm90/common/tma.cuh"
#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/prefill/prefill_epilogue.cuh"
#include "cuda/sm90/prefill/prefill_mainloop.cuh"
#include "cuda/sm90/prefill/prefill_tile_scheduler.cuh"
#include "cuda/sm90/prefill/prefill_trace.cuh"
#include "cuda/sm90/prefill/prefill_traits.cuh"

namespace lattn::cuda::sm90 {

template <class Traits, bool kCausal>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    hopper_prefill_kernel(const __grid_constant__ PrefillParams params, const __grid_constant__ PrefillSchedule sched,
                          const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                          const __grid_constant__ CUtensorMap tmap_v) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = typename Traits::Element;
  using Mainloop = PrefillMainloop<Traits, kCausal>;
  using Epilogue = PrefillEpilogue<Traits>;
  using Scheduler = typename Mainloop::Scheduler;
  constexpr int kBlockN = Traits::kBlockN;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  auto* bars = reinterpret_cast<PrefillBarriers*>(smem + Traits::kSmemBarriers);
  const uint32_t order = smem_u32(smem + Traits::kSmemOrder);  // the longest-first table

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&tmap_q);
    tma_prefetch_descriptor(&tmap_k);
    tma_prefetch_descriptor(&tmap_v);
    mbarrier_init(&bars->q_full, 1);
    mbarrier_init(&bars->q_empty, Traits::kConsumerWarps);
    for (int s = 0; s < Traits::kStages; ++s) {
      mbarrier_init(&bars->k_full[s], 1);
      mbarrier_init(&bars->v_full[s], 1);
      mbarrier_init(&bars->v_ready[s], Traits::kFixThreads);
      mbarrier_init(&bars->k_empty[s], Traits::kConsumerWarps);
      mbarrier_init(&bars->v_empty[s], Traits::kConsumerWarps + Traits::kFixThreads);
    }
    fence_barrier_init();
  }
  Scheduler::build_order(params, *reinterpret_cast<PrefillRequestOrder*>(smem + Traits::kSmemOrder),
                         sched.counter != nullptr, int(threadIdx.x), Traits::kThreads);
  __syncthreads();

  const int wg = warpgroup_index();
  if (wg == 0) {
    setmaxnreg_dec<Traits::kProducerRegs>();
    if (threadIdx.x == 0) {
      Mainloop::produce(params, sched, &tmap_q, &tmap_k, &tmap_v, smem_u32(smem), smem_u32(bars), order);
    } else if (threadIdx.x >= 32 && threadIdx.x < 32 + Traits::kFixThreads) {
      Mainloop::fix_v(smem_u32(smem), smem_u32(bars), int(threadIdx.x) - 32);
    }
  } else {
    setmaxnreg_inc<Traits::kConsumerRegs>();
    PrefillTrace::begin(sched);  // diagnostics only (sched.trace, off in the library)
    const int cwg = wg - 1;  // consumer warpgroup: rows [64 cwg, 64 cwg + 64) of the tile
    const int wg_thread = warpgroup_thread();
    const int warp = warp_in_warpgroup();
    const int lane = int(threadIdx.x % 32);
    const float scale_log2 = params.scale * 1.4426950408889634f;  // softmax in base 2
    const uint8_t* q_rows = smem + Traits::kSmemQ + cwg * Traits::kRowsPerWarpgroup * 128;
    uint32_t kv_iter = 0;
    uint32_t q_iter = 0;
    uint32_t v_ready_phase = 0;  // bit s: the parity of v_ready[s] waited for next
    // Ping-pong: a warpgroup issues its products only in its turn (a
    // "section"), and hands the turn to the other after issuing. Every
    // warpgroup runs n_blocks + 1 sections per tile (dummy ones for blocks it
    // skips), so the turns stay paired. Warpgroup 0 goes first.
    const auto section_begin = [&] {
      if constexpr (Traits::kPingPong) named_barrier_sync(Traits::kTurnBarrier + cwg, 256);
    };
    const auto section_end = [&] {
      if constexpr (Traits::kPingPong) named_barrier_arrive(Traits::kTurnBarrier + (1 - cwg), 256);
    };
    if (cwg == 1) section_end();

    const int thread_row = 16 * warp + lane / 4;  // this thread's first row within the warpgroup's 64
    const auto release = [&](uint64_t* bar) {
      __syncwarp();
      if (lane == 0) mbarrier_arrive(bar);
    };

    // The tiles PrefillMainloop::produce hands over, one per q_full phase,
    // until one named batch -1. One lane per warp reads the name (and that
    // lane releases Q for the warp, so the producer's next write is ordered
    // after every read of this one).
    for (;; ++q_iter) {
      mbarrier_wait(&bars->q_full, q_iter & 1);
      uint4 name = make_uint4(0, 0, 0, 0);
      if (lane == 0) name = ld_shared_v4(smem_u32(bars->tile));
      PrefillTileId id;
      id.batch = __shfl_sync(0xffffffffu, int(name.x), 0);
      id.head = __shfl_sync(0xffffffffu, int(name.y), 0);
      id.m_block = __shfl_sync(0xffffffffu, int(name.z), 0);
      if (id.batch < 0) break;
      PrefillTrace::tile(sched, q_iter, id.batch, id.head, id.m_block);
      PrefillTile t;
      Scheduler::make_tile(params, id, t);
      const int wg_row0 = t.row0 + cwg * Traits::kRowsPerWarpgroup;              // request-relative
      const int wg_rows = min(Traits::kRowsPerWarpgroup, t.seqlen_q - wg_row0);  // may be <= 0
      Element* out_rows = static_cast<Element*>(params.out) + int64_t(t.q_start + wg_row0) * params.out_row_stride +
                          int64_t(t.head) * params.out_head_stride;
      float* lse_rows =
          params.lse == nullptr ? nullptr : params.lse + int64_t(t.head) * params.lse_head_stride + t.q_start + wg_row0;
      if (t.n_blocks == 0) {  // no Q was loaded
        release(&bars->q_empty);
        if (wg_rows > 0) Epilogue::store_empty(out_rows, params.out_row_stride, lse_rows, wg_rows, wg_thread);
        continue;
      }
      // This warpgroup's rows see keys below wg_key_end.
      int wg_key_end = t.seqlen_k;
      if constexpr (kCausal) {
        wg_key_end = min(wg_key_end, min(wg_row0 + Traits::kRowsPerWarpgroup, t.seqlen_q) + t.diag);
      }
      if (wg_rows <= 0) wg_key_end = 0;
      const int row = wg_row0 + thread_row;  // this thread's first row (request-relative)

      float o[Mainloop::kNRegO];  // this tile's O (f32 accumulators, wgmma layout)
#pragma unroll
      for (int i = 0; i < Mainloop::kNRegO; ++i) o[i] = 0.f;
      uint32_t pf[Mainloop::kPVSteps][4];  // P of the block whose P V is next
      float m[2] = {-INFINITY, -INFINITY};
      float l[2] = {0.f, 0.f};

      const auto k_tile_of = [&](int stage) { return smem + Traits::kSmemK + stage * Traits::kKBytes; };
      const auto v_tile_of = [&](int stage) { return smem + Traits::kSmemV + stage * Traits::kVBytes; };
      // V of a block is usable once it landed, or, for a block the fixer
      // warps clean (PrefillMainloop::v_fix_rows), once they are done.
      const auto wait_v = [&](int stage, uint32_t phase, int key0) {
        int sanitize_from, zero_from;
        if (Mainloop::v_fix_rows(t, key0, sanitize_from, zero_from)) {
          mbarrier_wait(&bars->v_ready[stage], (v_ready_phase >> stage) & 1u);
          v_ready_phase ^= 1u << stage;
        } else {
          mbarrier_wait(&bars->v_full[stage], phase);
        }
      };
      const auto needs_mask = [&](int key0) {
        bool need = key0 + kBlockN > t.seqlen_k;
        if constexpr (kCausal) need = need || key0 + kBlockN - 1 > wg_row0 + t.diag;
        return need;
      };

      int nb = t.n_blocks - 1;
      // Blocks none of whose keys this warpgroup's rows see (causal: the top
      // blocks, for the upper warpgroup's rows): wait for the copies, release.
      for (; nb >= 0 && nb * kBlockN >= wg_key_end; --nb, ++kv_iter) {
        const int stage = int(kv_iter % 2);
        const uint32_t phase = (kv_iter / 2) & 1;
        mbarrier_wait(&bars->k_full[stage], phase);
        wait_v(stage, phase, nb * kBlockN);
        if (nb == 0) release(&bars->q_empty);
        release(&bars->k_empty[stage]);
        release(&bars->v_empty[stage]);
        section_begin();
        section_end();
      }
      if (nb < 0 && Traits::kOverlap) {
        section_begin();  // no block to compute: the tile's last section
        section_end();
      }

      // The steps of one key block, shared by both variants. qk_softmax:
      // S = Q K[stage]ᵀ (with kWithPV, block prev's O += P V issued behind it
      // in the same turn), K released (and Q after the tile's last block),
      // mask, online softmax -> s holds P (f32), corr the rescale of O.
      int prev_stage = 0, prev_key0 = 0;
      uint32_t prev_phase = 0;
      const auto qk_softmax = [&](auto with_pv, int stage, uint32_t phase, int key0, bool last_block,
                                  float(&s)[Mainloop::kNRegS], float(&corr)[2]) {
        constexpr bool kWithPV = decltype(with_pv)::value;
        mbarrier_wait(&bars->k_full[stage], phase);
        if constexpr (kWithPV) wait_v(prev_stage, prev_phase, prev_key0);
        section_begin();
        Mainloop::issue_qk(s, q_rows, k_tile_of(stage));
        if constexpr (kWithPV) Mainloop::issue_pv(o, pf, v_tile_of(prev_stage));
        section_end();
        wgmma_wait_group<kWithPV ? 1 : 0>();  // Q Kᵀ done (groups complete in order)
        fence_operands(s);
        if (last_block) release(&bars->q_empty);
        release(&bars->k_empty[stage]);
        if (needs_mask(key0)) Mainloop::mask(s, key0, row, t.seqlen_k, t.diag, lane);
        Mainloop::softmax_exp(s, m, l, corr, scale_log2);
      };
      // pv: O += P V[stage] alone in a turn, waited for, V released.
      const auto pv = [&](int stage, uint32_t phase, int key0) {
        wait_v(stage, phase, key0);
        section_begin();
        Mainloop::issue_pv(o, pf, v_tile_of(stage));
        section_end();
        wgmma_wait_group<0>();
        Mainloop::pv_done(o, pf);
        release(&bars->v_empty[stage]);
      };
      using NoPV = std::integral_constant<bool, false>;
      using WithPV = std::integral_constant<bool, true>;

      if constexpr (!Traits::kOverlap) {
        for (; nb >= 0; --nb, ++kv_iter) {
          const int stage = int(kv_iter % 2);
          const uint32_t phase = (kv_iter / 2) & 1;
          float s[Mainloop::kNRegS], corr[2];
          qk_softmax(NoPV{}, stage, phase, nb * kBlockN, nb == 0, s, corr);
          Mainloop::rescale_and_pack(s, o, corr, pf);
          pv(stage, phase, nb * kBlockN);
        }
      } else if (nb >= 0) {
        // Block n's Q Kᵀ runs on the tensor cores together with block n+1's
        // P V, and block n's softmax overlaps that P V.
        {
          float s[Mainloop::kNRegS], corr[2];
          prev_stage = int(kv_iter % 2);
          prev_phase = (kv_iter / 2) & 1;
          prev_key0 = nb * kBlockN;
          qk_softmax(NoPV{}, prev_stage, prev_phase, prev_key0, nb == 0, s, corr);
          Mainloop::rescale_and_pack(s, o, corr, pf);
        }
        for (--nb, ++kv_iter; nb >= 0; --nb, ++kv_iter) {
          const int stage = int(kv_iter % 2);
          const uint32_t phase = (kv_iter / 2) & 1;
          float s[Mainloop::kNRegS], corr[2];
          qk_softmax(WithPV{}, stage, phase, nb * kBlockN, nb == 0, s, corr);
          wgmma_wait_group<0>();  // P V done
          Mainloop::pv_done(o, pf);
          release(&bars->v_empty[prev_stage]);
          Mainloop::rescale_and_pack(s, o, corr, pf);
          prev_stage = stage;
          prev_phase = phase;
          prev_key0 = nb * kBlockN;
        }
        pv(prev_stage, prev_phase, prev_key0);
      }

      if (wg_rows > 0) {
        const int r = thread_row;
        Epilogue::store(o, m, l, out_rows + int64_t(r) * params.out_row_stride, params.out_row_stride,
                        lse_rows == nullptr ? nullptr : lse_rows + r, r < wg_rows, r + 8 < wg_rows, lane);
      }
    }
    if (cwg == 0) section_begin();  // takes the last turn warpgroup 1 handed over
    PrefillTrace::end(sched, q_iter);
  }
#endif
}

}  // namespace lattn::cuda::sm90
