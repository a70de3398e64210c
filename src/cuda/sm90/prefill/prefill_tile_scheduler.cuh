// src/cuda/sm90/prefill/prefill_tile_scheduler.cuh — the persistent CTAs'
// walks over (request, head, query block) tiles, and the geometry of a tile.
//
// Three walks; the launcher picks one per launch (docs/hopper.md, "Scheduler"):
//
// Dynamic, heaviest first (opt-in, measured in docs/perf.md). Tiles are numbered in one global
// order and handed out by an atomic counter: CTA c starts with tile c, and
// takes tile `grid + atomicAdd(counter, 1)` whenever it starts a tile, so a
// CTA that finished early takes more. The order: requests longest first,
// and within a request, heads in sections of `section_rows` key rows of
// K + V (0: one head per section), section by section; inside a section
// query block M - 1 first (causal: the one that sees the most keys), each
// block over the section's heads. The last section of a request takes the
// remainder of the heads, and that of the walk's last request enough heads
// that its heaviest tiles are not left for the end (tile_at). So the
// expensive tiles of every section come first, the last tiles handed out
// are the cheapest (query block 0 of the last request's last section), and
// the CTAs running at one time share the K/V of a few heads in L2. The
// counter is one int of a ring the launcher owns; the launch that takes
// value total - 1 (the last one taken) sets it back to 0, so the next
// launch on that slot finds 0 (prefill_launch.cu explains the ring).
//
// Static pairs ("pairs"). Work comes in units of two tiles of one (request, head): query blocks
// M - 1 - p and p. Under causal masking block m sees about m + 1 key blocks,
// so every unit of a request holds the same work (M + 1 blocks), and a
// static round robin over units is balanced: CTA c takes units c, c + grid,
// ..., the long tile first. Units are ordered by their request's cost per
// unit, largest first, then head, then p; the last, partial round of `grid`
// units is left idle by the rest of the CTAs (for 1 x 8192 at H128, 4096
// units of 65 blocks over 132 CTAs: 32 rounds for 31.03 of work).
//
// Static, balanced tail (the default for causal launches over at most twice
// as many keys as queries, prefill_balanced_tail_helps; the plain pairs
// otherwise): the static pairs, except that the
// last full round and the partial one are dealt as single tiles, heaviest
// first, in a snake over the CTAs (prefill_schedule.h, tail_plan), when
// they lie in the walk's last request; the makespan comes within about a
// tile of the average (1 x 8192: 30 rounds of pairs, then about 67 blocks
// of tail per CTA, where the pairs took 2 more rounds of 65).
//
// All order requests by a table in shared memory that every CTA builds at
// its start (PrefillRequestOrder::build: a rank count over the requests,
// O(batch²) / threads, and a prefix sum of their tiles or units). More than
// kMaxSortedRequests requests: request order, with max_seqlen_q's blocks
// per request (tiles past a request's end skipped).
//
// Only the producer thread walks; it hands each tile to the consumers
// through shared memory (PrefillBarriers::tile) with the tile's Q.
#pragma once

#include <cstdint>

#include "cuda/sm80/prefill/prefill_params.h"
#include "cuda/sm90/common/smem.cuh"
#include "cuda/sm90/prefill/prefill_schedule.h"

namespace lattn::cuda::sm90 {

using sm80::PrefillParams;

// A tile by name: request `batch` (-1: no more tiles), head, query block.
struct PrefillTileId {
  int batch, head, m_block;
};

struct PrefillTile {
  int head, m_block;
  int q_start, seqlen_q;  // the request's query rows [q_start, q_start + seqlen_q)
  int k_start, seqlen_k;  // its key rows [k_start, k_start + seqlen_k)
  int row0;               // first query row of the tile, request-relative
  int diag;               // causal: query i sees keys j <= i + diag (bottom-right aligned)
  int n_blocks;           // key blocks [0, n_blocks) hold a key some row of the tile sees
};

// The shared-memory table of the longest-first order. Read by 32-bit
// shared address: the producer walks it with 40 registers.
inline constexpr int kMaxSortedRequests = 256;
struct PrefillRequestOrder {
  int32_t request[kMaxSortedRequests];    // request of rank i (cost descending)
  int32_t begin[kMaxSortedRequests + 1];  // first tile (dynamic) or unit (static) of rank i; [batch] = all
  __device__ static uint32_t request_at(uint32_t order, int i) { return order + 4u * uint32_t(i); }
  __device__ static uint32_t begin_at(uint32_t order, int i) { return order + 4u * uint32_t(kMaxSortedRequests + i); }
};

template <int kBlockM, int kBlockN, bool kCausal>
struct PrefillTileScheduler {
  __host__ __device__ static int max_m_blocks(const PrefillParams& p) {
    return (p.max_seqlen_q + kBlockM - 1) / kBlockM;
  }
  __host__ __device__ static int units_per_head(const PrefillParams& p) { return (max_m_blocks(p) + 1) / 2; }
  __host__ __device__ static bool sorted(const PrefillParams& p) { return p.batch <= kMaxSortedRequests; }
  // Upper bounds of the units and tiles (exact counts when batch >
  // kMaxSortedRequests); the grid's size is at most the bound of its walk.
  __host__ __device__ static long long max_units(const PrefillParams& p) {
    return static_cast<long long>(units_per_head(p)) * p.num_heads * p.batch;
  }
  __host__ __device__ static long long max_tiles(const PrefillParams& p) {
    return static_cast<long long>(max_m_blocks(p)) * p.num_heads * p.batch;
  }

  // Builds the order (all threads of the CTA call it; a __syncthreads must
  // follow before the walk). Requests are ranked by the cost of their
  // average tile in key rows: causal (2 S_k - S_q) / 2, non-causal S_k
  // (doubled below: the cost of a static unit). `dynamic`: begin[] counts
  // tiles, else units.
  __device__ static void build_order(const PrefillParams& p, PrefillRequestOrder& order, bool dynamic, int thread,
                                     int threads) {
    if (!sorted(p)) return;
    const auto cost = [&](int r) {
      const int sq = __ldg(p.cu_seqlens_q + r + 1) - __ldg(p.cu_seqlens_q + r);
      const int sk = __ldg(p.cu_seqlens_k + r + 1) - __ldg(p.cu_seqlens_k + r);
      return sq == 0 ? -1 : (kCausal ? 2 * sk - sq : 2 * sk);  // no query rows: last, no tiles
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
    // begin: a prefix sum over the ranks, by the first warp.
    if (thread < 32) {
      const auto count = [&](int r) {
        const int sq = __ldg(p.cu_seqlens_q + r + 1) - __ldg(p.cu_seqlens_q + r);
        const int m_blocks = (sq + kBlockM - 1) / kBlockM;
        return (dynamic ? m_blocks : (m_blocks + 1) / 2) * p.num_heads;
      };
      const int per_lane = (p.batch + 31) / 32;
      int sum = 0;
      for (int i = thread * per_lane; i < min(p.batch, (thread + 1) * per_lane); ++i) sum += count(order.request[i]);
      int incl = sum;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int up = __shfl_up_sync(0xffffffffu, incl, d);
        if (thread >= d) incl += up;
      }
      int run = incl - sum;
      for (int i = thread * per_lane; i < min(p.batch, (thread + 1) * per_lane); ++i) {
        order.begin[i] = run;
        run += count(order.request[i]);
      }
      if (thread == 31) order.begin[p.batch] = incl;
    }
  }

  // ---- dynamic walk ---------------------------------------------------------------
  // Tiles of the walk (after build_order and a __syncthreads).
  __device__ static int num_tiles(const PrefillParams& p, uint32_t order) {
    return sorted(p) ? ld_shared_s32(PrefillRequestOrder::begin_at(order, p.batch)) : int(max_tiles(p));
  }

  // Names tile `index` of the dynamic walk; false when it does not exist
  // (past its request's blocks in the request-order fallback).
  __device__ static bool tile_at(const PrefillParams& p, const PrefillSchedule& s, uint32_t order, int index,
                                 PrefillTileId& id) {
    int m_blocks, local;
    bool last_request;  // the last request with tiles in the walk's order
    if (sorted(p)) {
      const int rank = rank_of(p, order, index);
      id.batch = ld_shared_s32(PrefillRequestOrder::request_at(order, rank));
      local = index - ld_shared_s32(PrefillRequestOrder::begin_at(order, rank));
      last_request = ld_shared_s32(PrefillRequestOrder::begin_at(order, rank + 1)) ==
                     ld_shared_s32(PrefillRequestOrder::begin_at(order, p.batch));
      m_blocks = (__ldg(p.cu_seqlens_q + id.batch + 1) - __ldg(p.cu_seqlens_q + id.batch) + kBlockM - 1) / kBlockM;
    } else {
      m_blocks = max_m_blocks(p);
      id.batch = index / (m_blocks * p.num_heads);
      local = index - id.batch * (m_blocks * p.num_heads);
      last_request = id.batch == p.batch - 1;
    }
    const int seqlen_k = __ldg(p.cu_seqlens_k + id.batch + 1) - __ldg(p.cu_seqlens_k + id.batch);
    const int per_section = prefill_heads_per_section(s.section_rows, seqlen_k, p.num_heads);
    const int last_heads =
        prefill_last_section_heads(p.num_heads, per_section, m_blocks, kCausal && last_request, int(gridDim.x));
    prefill_section_tile(local, m_blocks, p.num_heads, per_section, last_heads, id.head, id.m_block);
    if (!sorted(p)) {
      const int sq = __ldg(p.cu_seqlens_q + id.batch + 1) - __ldg(p.cu_seqlens_q + id.batch);
      return id.m_block * kBlockM < sq;
    }
    return true;
  }

  // ---- static walk (pairs) ---------------------------------------------------------
  // Units of the CTA's walk (after build_order and a __syncthreads).
  __device__ static int num_units(const PrefillParams& p, uint32_t order) {
    return sorted(p) ? ld_shared_s32(PrefillRequestOrder::begin_at(order, p.batch)) : int(max_units(p));
  }

  // Names half `half` (0: the long block, 1: the short one) of unit `unit`;
  // false when that tile does not exist.
  __device__ static bool unit_tile(const PrefillParams& p, uint32_t order, int unit, int half, PrefillTileId& id) {
    int local, m_blocks;
    if (sorted(p)) {
      const int rank = rank_of(p, order, unit);
      id.batch = ld_shared_s32(PrefillRequestOrder::request_at(order, rank));
      local = unit - ld_shared_s32(PrefillRequestOrder::begin_at(order, rank));
      m_blocks = (__ldg(p.cu_seqlens_q + id.batch + 1) - __ldg(p.cu_seqlens_q + id.batch) + kBlockM - 1) / kBlockM;
      return prefill_unit_tile(local, m_blocks, half, id.head, id.m_block);
    }
    // Request order: max_seqlen_q's units per head; tiles past the request's end skipped.
    const int units = units_per_head(p);
    id.batch = unit / (units * p.num_heads);
    local = unit - id.batch * (units * p.num_heads);
    const int pair = local % units;
    id.head = local / units;
    const int sq = __ldg(p.cu_seqlens_q + id.batch + 1) - __ldg(p.cu_seqlens_q + id.batch);
    m_blocks = (sq + kBlockM - 1) / kBlockM;
    id.m_block = half == 0 ? m_blocks - 1 - pair : pair;
    return half == 0 ? pair < (m_blocks + 1) / 2 : pair < m_blocks - 1 - pair;
  }

  // The balanced tail of the static walk (prefill_schedule.h): where it
  // starts and what it holds. front == the walk's units: no tail (none
  // asked for, no partial round, the request-order fallback, or a tail
  // that would reach past the walk's last request).
  struct Tail {
    int front;        // units [0, front) go round robin
    int batch;        // the tail's request
    int m_blocks;     // its query blocks
    int first_local;  // the tail's first unit inside the request
    int tiles;        // tiles of the tail
  };
  __device__ static Tail tail_plan(const PrefillParams& p, uint32_t order, int num_units, bool balanced) {
    Tail t{num_units, 0, 0, 0, 0};
    const int units = balanced && sorted(p) ? prefill_tail_units(num_units, int(gridDim.x)) : 0;
    if (units == 0) return t;
    const int rank = rank_of(p, order, num_units - 1);  // the last request with units
    const int begin = ld_shared_s32(PrefillRequestOrder::begin_at(order, rank));
    if (num_units - units < begin) return t;
    t.front = num_units - units;
    t.batch = ld_shared_s32(PrefillRequestOrder::request_at(order, rank));
    t.m_blocks = (__ldg(p.cu_seqlens_q + t.batch + 1) - __ldg(p.cu_seqlens_q + t.batch) + kBlockM - 1) / kBlockM;
    t.first_local = t.front - begin;
    t.tiles = prefill_tail_tiles(t.m_blocks, p.num_heads, t.first_local);
    return t;
  }

  // ---- a tile's geometry ------------------------------------------------------------
  __device__ static void make_tile(const PrefillParams& p, const PrefillTileId& id, PrefillTile& t) {
    t.head = id.head;
    t.m_block = id.m_block;
    t.q_start = __ldg(p.cu_seqlens_q + id.batch);
    t.seqlen_q = __ldg(p.cu_seqlens_q + id.batch + 1) - t.q_start;
    t.k_start = __ldg(p.cu_seqlens_k + id.batch);
    t.seqlen_k = __ldg(p.cu_seqlens_k + id.batch + 1) - t.k_start;
    t.row0 = t.m_block * kBlockM;
    t.diag = t.seqlen_k - t.seqlen_q;
    int key_end = t.seqlen_k;  // the tile's last row inside the request sees keys below key_end
    if constexpr (kCausal) key_end = min(key_end, min(t.row0 + kBlockM, t.seqlen_q) + t.diag);
    t.n_blocks = key_end > 0 ? (key_end + kBlockN - 1) / kBlockN : 0;
  }

 private:
  // The last rank whose begin <= index (binary search of the table).
  __device__ static int rank_of(const PrefillParams& p, uint32_t order, int index) {
    int lo = 0, hi = p.batch - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (ld_shared_s32(PrefillRequestOrder::begin_at(order, mid)) <= index) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }
};

}  // namespace lattn::cuda::sm90
