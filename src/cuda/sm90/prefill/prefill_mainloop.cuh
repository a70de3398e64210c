// src/cuda/sm90/prefill/prefill_mainloop.cuh — the stages of one key block:
// the producer's loads, and a consumer warpgroup's S = Q Kᵀ, mask, online
// softmax and O += P V.
//
// Register layout of a consumer thread (wgmma accumulator layout, see
// cuda/sm90/common/wgmma.cuh): warp w of the warpgroup owns rows 16w..16w+15
// of the warpgroup's 64; lane l holds rows r0 = 16w + l/4 and r0 + 8, and of
// every 8 columns j the two at 8j + 2(l%4). s[4j + 0..1] are row r0, s[4j +
// 2..3] row r0 + 8; the same for o over the V columns.
#pragma once

#include <type_traits>

#include <cuda.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda/common/fast_math.cuh"
#include "cuda/sm90/common/mbarrier.cuh"
#include "cuda/sm90/common/smem.cuh"
#include "cuda/sm90/common/tma.cuh"
#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/common/wgmma.cuh"
#include "cuda/sm90/prefill/prefill_tile_scheduler.cuh"
#include "cuda/sm90/prefill/prefill_traits.cuh"

namespace lattn::cuda::sm90 {

namespace prefill_detail {

using cuda::exp2_approx;  // cuda/common/fast_math.cuh
using cuda::pack2;

}  // namespace prefill_detail

template <class Traits, bool kCausal>
struct PrefillMainloop {
  using Element = typename Traits::Element;
  using Scheduler = PrefillTileScheduler<Traits::kBlockM, Traits::kBlockN, kCausal>;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kNRegS = kBlockN / 2;            // S accumulators per thread
  static constexpr int kNRegO = Traits::kHeadDimV / 2;  // O accumulators per thread
  static constexpr int kKSteps = Traits::kHeadDimQK / 16;
  static constexpr int kPVSteps = kBlockN / 16;

  // ---- producer (one thread) ---------------------------------------------------
  // Walks the CTA's tiles (prefill_tile_scheduler.cuh; `s.counter` set: the
  // dynamic walk, else the static pairs, with the balanced tail when
  // `s.balanced_tail`) and keeps the K/V stages full. Per
  // tile: once the consumers released the previous Q, it names the tile in
  // PrefillBarriers::tile and loads its Q (a tile that sees no key: q_full
  // armed with no copy, the consumers only write its empty rows); then K[n]
  // and V[n] for n = n_blocks - 1 down to 0, each into the next stage once
  // every consumer warp released that stage's K (resp. V). K and V are
  // released separately: with the overlapped consumer, K[n] is done long
  // before V[n], and the next K can land meanwhile. Boxes past the end of the
  // tensors are zero-filled by the copy engine; rows past a request's end
  // (the next request's) are masked or never written by the consumers, and
  // their V rows zeroed by the fixer warps (v_fix tells them, per block, what
  // to clean). After the last tile: a tile named batch -1 for the consumers,
  // and a kFixStop phase with no copy for the fixers. Shared memory by 32-bit
  // address: 40 registers after setmaxnreg.
  static constexpr int32_t kFixNone = -1;
  static constexpr int32_t kFixStop = -2;
  __device__ static void produce(const PrefillParams& p, const PrefillSchedule& sched, const CUtensorMap* tmap_q,
                                 const CUtensorMap* tmap_k, const CUtensorMap* tmap_v, uint32_t smem, uint32_t bars,
                                 uint32_t order) {
    const auto bar = [&](size_t offset, uint32_t stage) { return bars + uint32_t(offset) + 8u * stage; };
    uint32_t kv_iter = 0;  // key blocks loaded so far (stage = iter % 2, phase = iter / 2 % 2)
    uint32_t q_iter = 0;   // tiles handed to the consumers so far
    // Names the next tile to the consumers (batch -1: none left) once they
    // are done with the previous Q, and arms q_full: with Q's bytes when
    // `with_q`, else (a tile with no key, the end) a plain arrival.
    const auto hand_over = [&](const PrefillTileId& id, bool with_q) {
      mbarrier_wait(bar(offsetof(PrefillBarriers, q_empty), 0), (q_iter & 1) ^ 1);
      ++q_iter;
      st_shared_v4(bar(offsetof(PrefillBarriers, tile), 0),
                   make_uint4(uint32_t(id.batch), uint32_t(id.head), uint32_t(id.m_block), 0u));
      if (with_q) {
        mbarrier_arrive_expect_tx(bar(offsetof(PrefillBarriers, q_full), 0), Traits::kQBytes);
      } else {
        mbarrier_arrive(bar(offsetof(PrefillBarriers, q_full), 0));
      }
    };
    const auto produce_tile = [&](const PrefillTileId& id) {
      PrefillTile t;
      Scheduler::make_tile(p, id, t);
      hand_over(id, t.n_blocks > 0);
      if (t.n_blocks == 0) return;
#pragma unroll
      for (int c = 0; c < Traits::kQBoxes; ++c) {
        tma_load_3d(smem + uint32_t(Traits::kSmemQ + c * Traits::kQBoxBytes), tmap_q,
                    bar(offsetof(PrefillBarriers, q_full), 0), c * Traits::kBoxCols, t.head, t.q_start + t.row0);
      }
      for (int nb = t.n_blocks - 1; nb >= 0; --nb, ++kv_iter) {
        const uint32_t stage = kv_iter % 2;
        const uint32_t phase = (kv_iter / 2) & 1;
        const int key_row = t.k_start + nb * kBlockN;
        mbarrier_wait(bar(offsetof(PrefillBarriers, k_empty), stage), phase ^ 1);
        mbarrier_arrive_expect_tx(bar(offsetof(PrefillBarriers, k_full), stage), Traits::kKBytes);
#pragma unroll
        for (int c = 0; c < Traits::kQBoxes; ++c) {
          tma_load_3d(smem + uint32_t(Traits::kSmemK + c * Traits::kKVBoxBytes) + stage * uint32_t(Traits::kKBytes),
                      tmap_k, bar(offsetof(PrefillBarriers, k_full), stage), c * Traits::kBoxCols, t.head, key_row);
        }
        mbarrier_wait(bar(offsetof(PrefillBarriers, v_empty), stage), phase ^ 1);
        int sanitize_from, zero_from;
        const bool fix = v_fix_rows(t, nb * kBlockN, sanitize_from, zero_from);
        st_shared_s32(bar(offsetof(PrefillBarriers, v_fix), 0) + 4u * stage,
                      fix ? sanitize_from | zero_from << 16 : kFixNone);
        mbarrier_arrive_expect_tx(bar(offsetof(PrefillBarriers, v_full), stage), Traits::kVBytes);
#pragma unroll
        for (int c = 0; c < Traits::kVBoxes; ++c) {
          tma_load_3d(smem + uint32_t(Traits::kSmemV + c * Traits::kKVBoxBytes) + stage * uint32_t(Traits::kVBytes),
                      tmap_v, bar(offsetof(PrefillBarriers, v_full), stage), c * Traits::kBoxCols, t.head, key_row);
        }
      }
    };

    PrefillTileId id;
    if (sched.counter != nullptr) {
      // Dynamic: the tile after this one is taken from the counter before
      // this one is loaded, so the atomic's round trip is hidden behind the
      // tile's copies. Every launch takes exactly `total` values (each CTA's
      // takes end with its first value past the walk), so the CTA that takes
      // total - 1 takes the last one and sets the counter back to 0.
      const int total = Scheduler::num_tiles(p, order);
      for (int index = int(blockIdx.x); index < total;) {
        const int taken = atomicAdd(sched.counter, 1);
        if (Scheduler::tile_at(p, sched, order, index, id)) produce_tile(id);
        if (taken == total - 1) atomicExch(sched.counter, 0);
        index = int(gridDim.x) + taken;
      }
    } else {
      // Static pairs: units c, c + grid, ... below the tail's front, two
      // halves each; then (balanced) the tail's tiles of this CTA's snake.
      const auto tail = Scheduler::tail_plan(p, order, Scheduler::num_units(p, order), sched.balanced_tail);
      for (int work = 2 * blockIdx.x; work < 2 * tail.front; work += (work & 1) ? 2 * gridDim.x - 1 : 1) {
        if (Scheduler::unit_tile(p, order, work / 2, work & 1, id)) produce_tile(id);
      }
      id.batch = tail.batch;
      for (int round = 0;; ++round) {
        const int rank = prefill_snake_rank(int(blockIdx.x), round, int(gridDim.x));
        if (rank >= tail.tiles) break;
        prefill_tail_tile(rank, tail.m_blocks, p.num_heads, tail.first_local, id.head, id.m_block);
        produce_tile(id);
      }
    }
    hand_over(PrefillTileId{-1, 0, 0}, false);
    // The fixer warps' last phase: no copy, kFixStop.
    const uint32_t stage = kv_iter % 2;
    mbarrier_wait(bar(offsetof(PrefillBarriers, v_empty), stage), ((kv_iter / 2) & 1) ^ 1);
    st_shared_s32(bar(offsetof(PrefillBarriers, v_fix), 0) + 4u * stage, kFixStop);
    mbarrier_arrive(bar(offsetof(PrefillBarriers, v_full), stage));
  }

  // ---- consumer warpgroup ---------------------------------------------------------
  // Issues s = Q[wg rows] · K[stage]ᵀ (overwrites s) as one wgmma group.
  // Both operands K-major: the k16 step kk of box c starts 32 kk bytes into
  // the box. s must not be touched until the group is waited for.
  __device__ static void issue_qk(float (&s)[kNRegS], const uint8_t* q_rows, const uint8_t* k_tile) {
    const uint64_t q_desc = make_desc_kmajor_sw128(q_rows);
    const uint64_t k_desc = make_desc_kmajor_sw128(k_tile);
    fence_operands(s);
    warpgroup_arrive();
#pragma unroll
    for (int step = 0; step < kKSteps; ++step) {
      const int box = step / 4, kk = step % 4;
      wgmma_ss<kBlockN, Traits::kBf16>(s, desc_advance(q_desc, box * Traits::kQBoxBytes + kk * 32),
                                       desc_advance(k_desc, box * Traits::kKVBoxBytes + kk * 32), step > 0);
    }
    wgmma_commit_group();
  }

  // Issues o += P · V[stage] as one wgmma group: P (this thread's fragments,
  // 16-bit) from registers, V N-major ([keys][64] boxes, LBO = box bytes);
  // k16 step kk = keys 16kk... o and pf must not be touched until it is waited for.
  __device__ static void issue_pv(float (&o)[kNRegO], uint32_t (&pf)[kPVSteps][4], const uint8_t* v_tile) {
    const uint64_t v_desc = make_desc_mnmajor_sw128(v_tile, Traits::kKVBoxBytes);
    fence_operands(o);
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_operand(pf[kk][i]);
    warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      wgmma_rs<Traits::kHeadDimV, Traits::kBf16, 1>(o, pf[kk], desc_advance(v_desc, kk * 16 * 128), 1);
    }
    wgmma_commit_group();
  }

  // After the P · V group completed: o and pf are this thread's again.
  __device__ static void pv_done(float (&o)[kNRegO], uint32_t (&pf)[kPVSteps][4]) {
    fence_operands(o);
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_operand(pf[kk][i]);
  }

  // Sets s to -inf where the key is past the request's keys or (causal)
  // above the row's diagonal. key0: the block's first key; row: this thread's
  // first row (request-relative).
  __device__ static void mask(float (&s)[kNRegS], int key0, int row, int seqlen_k, int diag, int lane) {
    const int col0 = key0 + 2 * (lane % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int limit = seqlen_k;
      if constexpr (kCausal) limit = min(limit, row + 8 * h + diag + 1);
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col0 + 8 * j + e >= limit) s[4 * j + 2 * h + e] = -INFINITY;
        }
    }
  }

  // Online softmax of one block in base 2, first half: m (scaled-log2 row
  // max so far) and l (this thread's part of the row sum) updated, s
  // replaced by p = 2^(s scale_log2 - m), and the factor corr by which O
  // must be rescaled before this block's P · V is added.
  __device__ static void softmax_exp(float (&s)[kNRegS], float (&m)[2], float (&l)[2], float (&corr)[2],
                                     float scale_log2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h], mx * scale_log2);
      // A row that has seen no key yet keeps offset 0: its p are all 0.
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      corr[h] = prefill_detail::exp2_approx(m[h] - m_use);
      m[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[4 * j + 2 * h + e];
          x = prefill_detail::exp2_approx(fmaf(x, scale_log2, -m_use));
          sum += x;
        }
      l[h] = l[h] * corr[h] + sum;
    }
  }

  // Second half: o *= corr (per row), p packed as the A fragments of P · V.
  __device__ static void rescale_and_pack(const float (&s)[kNRegS], float (&o)[kNRegO], const float (&corr)[2],
                                          uint32_t (&pf)[kPVSteps][4]) {
#pragma unroll
    for (int j = 0; j < Traits::kHeadDimV / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[4 * j + e] *= corr[e / 2];
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      pf[kk][0] = prefill_detail::pack2<Element>(s[8 * kk + 0], s[8 * kk + 1]);
      pf[kk][1] = prefill_detail::pack2<Element>(s[8 * kk + 2], s[8 * kk + 3]);
      pf[kk][2] = prefill_detail::pack2<Element>(s[8 * kk + 4], s[8 * kk + 5]);
      pf[kk][3] = prefill_detail::pack2<Element>(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }

  // ---- V rows that must not reach a row through 0 · NaN -------------------------
  // P is exactly 0 for a key a row may not see, but the tensor cores compute
  // 0 · NaN = NaN, so a V tile's rows are cleaned before any P · V reads them
  // where they can hold a non-finite value that some row must not see:
  //   - rows past the request's keys (the next request's rows, unused
  //     workspace rows — NaN allowed there — or the copy engine's zeros):
  //     rows [zero_from, kBlockN) are zeroed;
  //   - causal: keys past the diagonal of the tile's first row (the request's
  //     own later tokens): rows [sanitize_from, zero_from) get their
  //     non-finite values replaced by 0. A row that does see such a key is
  //     NaN through its score (K and V are projections of the same latent
  //     entry; docs/mla.md, "NaN and inf").
  // Returns false when the block needs neither (every block but the one on
  // the diagonal and the one crossing the keys' end). Depends only on the
  // tile, so the fixer warps and both consumer warpgroups decide alike.
  __device__ static bool v_fix_rows(const PrefillTile& t, int key0, int& sanitize_from, int& zero_from) {
    zero_from = min(kBlockN, t.seqlen_k - key0);
    sanitize_from = zero_from;
    if constexpr (kCausal) sanitize_from = max(0, min(zero_from, t.row0 + t.diag + 1 - key0));
    return sanitize_from < kBlockN;
  }

  // Cleans rows [sanitize_from, kBlockN) of the V tile at shared address
  // v_tile as v_fix_rows says, with `threads` threads (thread = 0..threads-1).
  // Whole rows are contiguous 128 bytes in every [kBlockN][64] box (the
  // swizzle permutes 16-byte chunks inside a row only). 32-bit shared
  // addresses: the fixer warps run with the producer's 24 registers.
  __device__ static void clean_v(uint32_t v_tile, int sanitize_from, int zero_from, int thread, int threads) {
    constexpr uint32_t kExp = std::is_same_v<Element, __nv_bfloat16> ? 0x7f80u : 0x7c00u;  // all-ones exponent
#pragma unroll 1
    for (int box = 0; box < Traits::kVBoxes; ++box) {
      const uint32_t base = v_tile + uint32_t(box * Traits::kKVBoxBytes);
      const uint32_t zero_end = base + uint32_t(kBlockN * 128);
#pragma unroll 1
      for (uint32_t a = base + uint32_t(zero_from * 128 + thread * 16); a < zero_end; a += uint32_t(threads * 16)) {
        st_shared_v4(a, make_uint4(0, 0, 0, 0));
      }
      // Four independent 16-byte loads in flight per thread: the scan is
      // bound by shared-memory latency, not by its few integer operations.
      const uint32_t sanitize_end = base + uint32_t(zero_from * 128);
      const uint32_t stride = uint32_t(threads * 16);
#pragma unroll 1
      for (uint32_t a = base + uint32_t(sanitize_from * 128 + thread * 16); a < sanitize_end; a += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if (a + u * stride < sanitize_end) v[u] = ld_shared_v4(a + u * stride);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if (a + u * stride >= sanitize_end) continue;
          uint32_t* w = reinterpret_cast<uint32_t*>(&v[u]);
          bool changed = false;
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            uint32_t x = w[k];
            if ((x & kExp) == kExp) x &= 0xffff0000u;
            if (((x >> 16) & kExp) == kExp) x &= 0x0000ffffu;
            changed |= x != w[k];
            w[k] = x;
          }
          if (changed) st_shared_v4(a + u * stride, v[u]);
        }
      }
    }
  }

  // The fixer warps (producer warps 1..kFixWarps; fix_thread in [0, 32
  // kFixWarps)): for every key block the producer loads, in order, wait for
  // its V, read what v_fix says and, for a block that v_fix_rows selects,
  // clean it and arrive on the stage's v_ready barrier (the consumers wait on
  // v_ready instead of v_full for exactly those blocks); then release the
  // stage (v_empty counts the fixer warps too, so neither the V tile nor
  // v_fix is overwritten before the fixers are done). Off the consumers'
  // path: a block's V is needed only after its Q Kᵀ and softmax. smem, bars:
  // 32-bit shared addresses (24 registers after setmaxnreg).
  __device__ static void fix_v(uint32_t smem, uint32_t bars, int fix_thread) {
    for (uint32_t kv_iter = 0;; ++kv_iter) {
      const uint32_t stage = kv_iter % 2;
      mbarrier_wait(bars + uint32_t(offsetof(PrefillBarriers, v_full)) + 8u * stage, (kv_iter / 2) & 1);
      const int32_t fix = ld_shared_s32(bars + uint32_t(offsetof(PrefillBarriers, v_fix)) + 4u * stage);
      if (fix == kFixStop) break;
      if (fix != kFixNone) {
        clean_v(smem + uint32_t(Traits::kSmemV) + stage * uint32_t(Traits::kVBytes), fix & 0xffff, fix >> 16,
                fix_thread, Traits::kFixThreads);
        fence_proxy_async_shared();  // the stores before the tensor cores' reads (async proxy)
        mbarrier_arrive(bars + uint32_t(offsetof(PrefillBarriers, v_ready)) + 8u * stage);
      }
      // Every fixer thread arrives (not one per warp after __syncwarp): each
      // thread's own accesses are then ordered by the barrier it arrives on,
      // as compute-sanitizer's racecheck models it.
      mbarrier_arrive(bars + uint32_t(offsetof(PrefillBarriers, v_empty)) + 8u * stage);
    }
  }
};

}  // namespace lattn::cuda::sm90
