// src/cuda/sm90/prefill/prefill_consumer_stream.cuh — a consumer warpgroup of
// the Hopper prefill kernel as one stream of key blocks across the CTA's
// tiles: a tile's last P V is issued with the next tile's first Q Kᵀ, and the
// tile's O is written after that P V, under the other warpgroup's products;
// sm_90a only.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/sm90/common/mbarrier.cuh"
#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/prefill/prefill_epilogue.cuh"
#include "cuda/sm90/prefill/prefill_mainloop.cuh"
#include "cuda/sm90/prefill/prefill_tile_scheduler.cuh"
#include "cuda/sm90/prefill/prefill_traits.cuh"

namespace lattn::cuda::sm90 {

// See prefill_kernel.cuh for the steps of one block.
template <class Traits, bool kCausal>
struct PrefillConsumerStream {
  using Element = typename Traits::Element;
  using Mainloop = PrefillMainloop<Traits, kCausal>;
  using Epilogue = PrefillEpilogue<Traits>;
  using Scheduler = typename Mainloop::Scheduler;
  static constexpr int kBlockN = Traits::kBlockN;

  // wg: this thread's warpgroup (1 or 2); smem: the 1024-aligned base;
  // order: the longest-first table (32-bit shared address).
  __device__ static void run(const PrefillParams& params, uint8_t* smem, PrefillBarriers* bars, uint32_t order,
                             int wg) {
    const int cwg = wg - 1;  // consumer warpgroup: rows [64 cwg, 64 cwg + 64) of the tile
    const int wg_thread = warpgroup_thread();
    const int warp = warp_in_warpgroup();
    const int lane = int(threadIdx.x % 32);
    const float scale_log2 = params.scale * 1.4426950408889634f;  // softmax in base 2
    const int num_units = Scheduler::num_units(params, order);
    const uint8_t* q_rows = smem + Traits::kSmemQ + cwg * Traits::kQHalfBoxBytes;
    uint32_t kv_iter = 0;
    uint32_t q_iter = 0;
    uint32_t v_ready_phase = 0;  // bit s: the parity of v_ready[s] waited for next
    // Ping-pong: a warpgroup issues its products only in its turn (a
    // "section"), and hands the turn to the other after issuing. Every
    // warpgroup runs n_blocks sections per tile and one more at the end, so
    // the turns stay paired. Warpgroup 0 goes first.
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
    const auto k_tile_of = [&](int stage) { return smem + Traits::kSmemK + stage * Traits::kKBytes; };
    const auto v_tile_of = [&](int stage) { return smem + Traits::kSmemV + stage * Traits::kVBytes; };
    // V of a block is usable once it landed, or, for a block the fixer warps
    // clean (PrefillMainloop::v_fix_rows), once they are done.
    const auto wait_v = [&](int stage, uint32_t phase, bool fixed) {
      if (fixed) {
        mbarrier_wait(&bars->v_ready[stage], (v_ready_phase >> stage) & 1u);
        v_ready_phase ^= 1u << stage;
      } else {
        mbarrier_wait(&bars->v_full[stage], phase);
      }
    };

    // One stream of key blocks across the CTA's tiles. The block whose P is
    // packed in pf has its O += P V issued together with the next block's
    // S = Q Kᵀ — the next tile's first block too — so the tensor cores get
    // the next tile's first product while a tile's last P V runs, and the
    // tile's epilogue (O / row sum to global memory) runs after that P V,
    // under the other warpgroup's products, instead of between two tiles.
    float o[Mainloop::kNRegO];  // O of the tile of the pending block (f32 accumulators, wgmma layout)
#pragma unroll
    for (int i = 0; i < Mainloop::kNRegO; ++i) o[i] = 0.f;
    uint32_t pf[Mainloop::kPVSteps][4];  // P of the pending block
    float m[2], l[2];                    // the current tile's row max (scaled log2) and partial sums
    // The pending block is always the previous one of the stream (kv_iter - 1);
    // what else is known of it, in few registers: while a block's S = Q Kᵀ
    // and the previous P V are in flight, S, O and P hold 160 of the 168
    // registers of the launch, so everything else live there is
    // warpgroup-uniform (kept in uniform registers) — kPending, kPendFixed
    // (its V waits on v_ready), kPendLast (its tile's last block: the tile's O
    // is written after its P V, to rows [ep_row0, ep_row0 + (ep_head_rows &
    // 127)) of head ep_head_rows >> 7).
    constexpr uint32_t kPending = 1, kPendFixed = 2, kPendLast = 4;
    uint32_t pend = 0;
    int ep_row0 = 0, ep_head_rows = 0;
    const auto pend_stage = [&] { return int((kv_iter - 1) % 2); };
    const auto pend_phase = [&] { return ((kv_iter - 1) / 2) & 1; };

    // After the pending block's P V completed: V released, and for a tile's
    // last block the tile's O (already normalized) written and O cleared for
    // the next tile.
    const auto store_o = [&] {
      const int rows = ep_head_rows & 127;
      Element* out_row = static_cast<Element*>(params.out) + int64_t(ep_row0 + thread_row) * params.out_row_stride +
                         int64_t(ep_head_rows >> 7) * params.out_head_stride;
      Epilogue::store_normalized(o, out_row, params.out_row_stride, thread_row < rows, thread_row + 8 < rows, lane);
#pragma unroll
      for (int i = 0; i < Mainloop::kNRegO; ++i) o[i] = 0.f;
    };
    const auto finish_pending = [&] {
      Mainloop::pv_done(o, pf);
      release(&bars->v_empty[pend_stage()]);
      if (pend & kPendLast) store_o();
      pend = 0;
    };
    const auto issue_pending_pv = [&] {
      wait_v(pend_stage(), pend_phase(), pend & kPendFixed);
      section_begin();
      Mainloop::issue_pv(o, pf, v_tile_of(pend_stage()));
    };

    // The walk of PrefillMainloop::produce: units c, c + grid, ..., two halves each.
    for (int work = 2 * blockIdx.x; work < 2 * num_units; work += (work & 1) ? 2 * gridDim.x - 1 : 1) {
      PrefillTile t;
      if (!Scheduler::get_tile(params, order, work / 2, work & 1, t)) continue;
      const int wg_row0 = t.row0 + cwg * Traits::kRowsPerWarpgroup;              // request-relative
      const int wg_rows = min(Traits::kRowsPerWarpgroup, t.seqlen_q - wg_row0);  // may be <= 0
      Element* out_rows = static_cast<Element*>(params.out) + int64_t(t.q_start + wg_row0) * params.out_row_stride +
                          int64_t(t.head) * params.out_head_stride;
      float* lse_rows =
          params.lse == nullptr ? nullptr : params.lse + int64_t(t.head) * params.lse_head_stride + t.q_start + wg_row0;
      if (t.n_blocks == 0) {
        if (wg_rows > 0) Epilogue::store_empty(out_rows, params.out_row_stride, lse_rows, wg_rows, wg_thread);
        continue;
      }
      const int row = wg_row0 + thread_row;  // this thread's first row (request-relative)
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.f;

      mbarrier_wait(&bars->q_full[cwg], q_iter & 1);
      ++q_iter;
      const auto needs_mask = [&](int key0) {
        bool need = key0 + kBlockN > t.seqlen_k;
        if constexpr (kCausal) need = need || key0 + kBlockN - 1 > wg_row0 + t.diag;
        return need;
      };

      // A tile's last block: the softmax state is final; 1 / row sum folded
      // into this block's P and O's rescale, LSE written now; O follows this
      // block's P V (in the next turn, maybe with the next tile's first Q Kᵀ).
      const auto normalize = [&](float(&s)[Mainloop::kNRegS], float(&corr)[2]) {
        float sum[2];
        Mainloop::normalize_last(s, corr, l, sum);
        const bool valid0 = thread_row < wg_rows, valid1 = thread_row + 8 < wg_rows;
        if (lse_rows != nullptr) Epilogue::store_lse(m, sum, lse_rows + thread_row, valid0, valid1, lane);
        ep_row0 = t.q_start + wg_row0;
        ep_head_rows = t.head << 7 | wg_rows;
      };

      for (int nb = t.n_blocks - 1; nb >= 0; --nb, ++kv_iter) {
        const int stage = int(kv_iter % 2);
        const uint32_t phase = (kv_iter / 2) & 1;
        const int key0 = nb * kBlockN;
        int sanitize_from, zero_from;
        const bool fixed = Mainloop::v_fix_rows(t, key0, sanitize_from, zero_from);
        mbarrier_wait(&bars->k_full[stage], phase);
        float s[Mainloop::kNRegS], corr[2];
        if (pend & kPending) {
          // S = Q K[nb]ᵀ, then the pending block's O += P V behind it; the
          // softmax of this block runs while P V is on the tensor cores.
          wait_v(pend_stage(), pend_phase(), pend & kPendFixed);
          section_begin();
          Mainloop::issue_qk(s, q_rows, k_tile_of(stage));
          Mainloop::issue_pv(o, pf, v_tile_of(pend_stage()));
          section_end();
          wgmma_wait_group<1>();  // Q Kᵀ done (groups complete in order)
          fence_operands(s);
          if (nb == 0) release(&bars->q_empty[cwg]);
          release(&bars->k_empty[stage]);
          if (needs_mask(key0)) Mainloop::mask(s, key0, row, t.seqlen_k, t.diag, lane);
          Mainloop::softmax_exp(s, m, l, corr, scale_log2);
          wgmma_wait_group<0>();  // P V done
          // The previous tile's O (if that was its last block) is written
          // now, and this block's normalization (if it is its tile's last)
          // done now: neither under the P V in flight, whose O and P fill
          // the registers S leaves.
          finish_pending();
          if (nb == 0) normalize(s, corr);
          Mainloop::rescale_and_pack(s, o, corr, pf);
        } else {
          section_begin();
          Mainloop::issue_qk(s, q_rows, k_tile_of(stage));
          section_end();
          wgmma_wait_group<0>();
          fence_operands(s);
          if (nb == 0) release(&bars->q_empty[cwg]);
          release(&bars->k_empty[stage]);
          if (needs_mask(key0)) Mainloop::mask(s, key0, row, t.seqlen_k, t.diag, lane);
          Mainloop::softmax_exp(s, m, l, corr, scale_log2);
          if (nb == 0) normalize(s, corr);
          Mainloop::rescale_and_pack(s, o, corr, pf);
        }
        pend = kPending | (fixed ? kPendFixed : 0u) | (nb == 0 ? kPendLast : 0u);
      }
    }
    // The last pending P V, in one more turn of each warpgroup.
    if (pend & kPending) {
      issue_pending_pv();
      section_end();
      wgmma_wait_group<0>();
      finish_pending();
    } else {
      section_begin();
      section_end();
    }
    if (cwg == 0) section_begin();  // takes the last turn warpgroup 1 handed over
  }
};

}  // namespace lattn::cuda::sm90
