// src/cuda/sm90/prefill/prefill_tile_scheduler.cuh — the persistent CTAs'
// walk over (request, head, query block) tiles, and the geometry of a tile.
//
// Work comes in units of two tiles of one (request, head): query blocks
// M - 1 - p and p (M blocks in the request). Under causal masking block m
// sees about m + 1 key blocks, so every unit of a request holds the same
// work (M + 1 blocks) — the long block first, then the short one — and a
// static round robin over units is balanced (a plain round robin over
// single tiles was not: with 16 x 1024 tokens some CTAs got a third more
// work than others). The grid is min(units, SMs); CTA c takes units c,
// c + grid, ... (the producer, the fixer warps and the consumers walk the
// same list without talking to each other).
//
// Longest first: requests differ in cost (varlen), so units are ordered by
// their request's cost per unit, largest first (ties: request order), and
// within a request by head, then p — the CTAs running at one time work on a
// few heads of one request, whose K/V is read from HBM about once and then
// served by L2. With the round robin, each "round" of `grid` units then
// holds units of about equal cost and the last, partial round the cheapest
// ones, so the last wave is short. The order is a table in shared memory
// that every CTA builds at its start (PrefillRequestOrder::build: a rank
// count over the requests, O(batch²) / threads, and a prefix sum of units);
// it also drops the empty units that a fixed units-per-request count would
// give short requests. More than kMaxSortedRequests requests: request order
// with max_seqlen_q's units per request (empty units skipped by every role).
#pragma once

#include <cstdint>

#include "cuda/sm80/prefill/prefill_params.h"
#include "cuda/sm90/common/smem.cuh"

namespace lattn::cuda::sm90 {

using sm80::PrefillParams;

struct PrefillTile {
  int head, m_block;
  int q_start, seqlen_q;  // the request's query rows [q_start, q_start + seqlen_q)
  int k_start, seqlen_k;  // its key rows [k_start, k_start + seqlen_k)
  int row0;               // first query row of the tile, request-relative
  int diag;               // causal: query i sees keys j <= i + diag (bottom-right aligned)
  int n_blocks;           // key blocks [0, n_blocks) hold a key some row of the tile sees
};

// The shared-memory table of the longest-first order. Read by 32-bit
// shared address (PrefillTileScheduler's `order`): the producer warpgroup
// walks it with 24 registers.
inline constexpr int kMaxSortedRequests = 256;
struct PrefillRequestOrder {
  int32_t request[kMaxSortedRequests];         // request of rank i (cost descending)
  int32_t unit_begin[kMaxSortedRequests + 1];  // first unit of rank i; [batch] = all units
  __device__ static uint32_t request_at(uint32_t order, int i) { return order + 4u * uint32_t(i); }
  __device__ static uint32_t unit_begin_at(uint32_t order, int i) {
    return order + 4u * uint32_t(kMaxSortedRequests + i);
  }
};

template <int kBlockM, int kBlockN, bool kCausal>
struct PrefillTileScheduler {
  __host__ __device__ static int max_m_blocks(const PrefillParams& p) {
    return (p.max_seqlen_q + kBlockM - 1) / kBlockM;
  }
  __host__ __device__ static int units_per_head(const PrefillParams& p) { return (max_m_blocks(p) + 1) / 2; }
  // An upper bound of the units (the exact count when batch > kMaxSortedRequests): the grid's size.
  __host__ __device__ static long long max_units(const PrefillParams& p) {
    return static_cast<long long>(units_per_head(p)) * p.num_heads * p.batch;
  }
  __host__ __device__ static bool sorted(const PrefillParams& p) { return p.batch <= kMaxSortedRequests; }

  // Builds the order (all threads of the CTA call it; a __syncthreads must
  // follow before any get_tile). Cost of a unit of request r, in key rows:
  // causal, the long and the short tile see about 2 S_k - S_q keys together;
  // non-causal 2 S_k (every tile sees all keys).
  __device__ static void build_order(const PrefillParams& p, PrefillRequestOrder& order, int thread, int threads) {
    if (!sorted(p)) return;
    const auto cost = [&](int r) {
      const int sq = __ldg(p.cu_seqlens_q + r + 1) - __ldg(p.cu_seqlens_q + r);
      const int sk = __ldg(p.cu_seqlens_k + r + 1) - __ldg(p.cu_seqlens_k + r);
      return sq == 0 ? -1 : (kCausal ? 2 * sk - sq : 2 * sk);  // no query rows: last, no units
    };
    for (int r = thread; r < p.batch; r += threads) {
      const int c = cost(r);
      int rank = 0;
      for (int o = 0; o < p.batch; ++o) {
        const int co = cost(o);
        rank += co > c || (co == c && o < r);
      }
      order.request[rank] = r;
    }
    __syncthreads();
    // unit_begin: a prefix sum of units over the ranks, by the first warp.
    if (thread < 32) {
      const int per_lane = (p.batch + 31) / 32;
      int sum = 0;
      for (int i = thread * per_lane; i < min(p.batch, (thread + 1) * per_lane); ++i) {
        sum += units_of(p, order.request[i]);
      }
      int incl = sum;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int up = __shfl_up_sync(0xffffffffu, incl, d);
        if (thread >= d) incl += up;
      }
      int run = incl - sum;
      for (int i = thread * per_lane; i < min(p.batch, (thread + 1) * per_lane); ++i) {
        order.unit_begin[i] = run;
        run += units_of(p, order.request[i]);
      }
      if (thread == 31) order.unit_begin[p.batch] = incl;
    }
  }

  // Units of the CTA's walk (after build_order and a __syncthreads).
  __device__ static int num_units(const PrefillParams& p, uint32_t order) {
    return sorted(p) ? ld_shared_s32(PrefillRequestOrder::unit_begin_at(order, p.batch)) : int(max_units(p));
  }

  // Fills `t` for half `half` (0: the long block, 1: the short one) of unit
  // `unit`; false when that tile does not exist (nothing to do for any role).
  __device__ static bool get_tile(const PrefillParams& p, uint32_t order, int unit, int half, PrefillTile& t) {
    int batch, units, local;
    if (sorted(p)) {
      int lo = 0, hi = p.batch - 1;  // the last rank whose unit_begin <= unit
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (ld_shared_s32(PrefillRequestOrder::unit_begin_at(order, mid)) <= unit) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      batch = ld_shared_s32(PrefillRequestOrder::request_at(order, lo));
      local = unit - ld_shared_s32(PrefillRequestOrder::unit_begin_at(order, lo));
      t.q_start = __ldg(p.cu_seqlens_q + batch);
      t.seqlen_q = __ldg(p.cu_seqlens_q + batch + 1) - t.q_start;
      units = ((t.seqlen_q + kBlockM - 1) / kBlockM + 1) / 2;
    } else {
      units = units_per_head(p);
      local = unit % (units * p.num_heads);
      batch = unit / (units * p.num_heads);
      t.q_start = __ldg(p.cu_seqlens_q + batch);
      t.seqlen_q = __ldg(p.cu_seqlens_q + batch + 1) - t.q_start;
    }
    const int pair = local % units;
    t.head = local / units;
    t.k_start = __ldg(p.cu_seqlens_k + batch);
    t.seqlen_k = __ldg(p.cu_seqlens_k + batch + 1) - t.k_start;
    const int m_blocks = (t.seqlen_q + kBlockM - 1) / kBlockM;
    t.m_block = half == 0 ? m_blocks - 1 - pair : pair;
    if (half == 0 ? pair >= (m_blocks + 1) / 2 : pair >= m_blocks - 1 - pair) return false;
    t.row0 = t.m_block * kBlockM;
    t.diag = t.seqlen_k - t.seqlen_q;
    int key_end = t.seqlen_k;  // the tile's last row inside the request sees keys below key_end
    if constexpr (kCausal) key_end = min(key_end, min(t.row0 + kBlockM, t.seqlen_q) + t.diag);
    t.n_blocks = key_end > 0 ? (key_end + kBlockN - 1) / kBlockN : 0;
    return true;
  }

 private:
  // Units of one request (all heads).
  __device__ static int units_of(const PrefillParams& p, int r) {
    const int sq = __ldg(p.cu_seqlens_q + r + 1) - __ldg(p.cu_seqlens_q + r);
    return ((sq + kBlockM - 1) / kBlockM + 1) / 2 * p.num_heads;
  }
};

}  // namespace lattn::cuda::sm90
