// src/cuda/sm90/prefill/prefill_schedule.h — how a Hopper prefill launch
// walks its tiles: the choice the caller makes and the kernel argument it
// becomes (internal; no CUDA header). The walks themselves are in
// prefill_tile_scheduler.cuh.
#pragma once

#if !defined(LATTN_HOST_DEVICE)
#if defined(__CUDACC__)
#define LATTN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LATTN_HOST_DEVICE inline
#endif
#endif

namespace lattn::cuda::sm90 {

enum class HopperPrefillSchedule {
  automatic,        // LATTN_HOPPER_PREFILL_SCHEDULE (read once: "static", "pairs" or "dynamic"), else static:
                    // static_balanced where prefill_balanced_tail_helps, else static_pairs
  static_pairs,     // the static round robin over paired query blocks, to the end ("pairs")
  static_balanced,  // the same, its last rounds dealt as single tiles heaviest first (always, when named)
  dynamic,          // heaviest first from an atomic tile counter
};

// The kernel argument.
struct PrefillSchedule {
  int* counter = nullptr;      // dynamic: this launch's tile counter (0 at the start); nullptr: a static walk
  int section_rows = 0;        // dynamic: key rows of one head's K + V that a section of heads may hold
  bool balanced_tail = false;  // static: deal the last rounds as single tiles (below)
  int max_ctas = 0;            // the launcher's grid cap (0: one CTA per SM; tests use small caps)
  // Diagnostics (benchmarks only; nullptr in every library launch): when
  // set, each CTA records where and when it ran (prefill_trace.cuh, layout
  // below): grid x kPrefillTraceWords words, written by one consumer thread.
  unsigned long long* trace = nullptr;
};

// ---- the diagnostic trace of a launch (PrefillSchedule::trace) -------------------------
// Per CTA (blockIdx.x), kPrefillTraceWords 64-bit words:
//   [0] %smid, [1] %globaltimer (ns) and [2] clock64 (SM cycles) when the
//   consumers start, [3] and [4] the same when they leave their loop, [5]
//   tiles seen; then per tile i < kPrefillTraceTiles, from word
//   kPrefillTraceHeader + 3 i: globaltimer and clock64 when the tile's Q has
//   landed, and its name (batch << 40 | head << 20 | m_block).
// The ratio of clock64 to globaltimer over a CTA's life is its SM clock.
inline constexpr int kPrefillTraceHeader = 8;
inline constexpr int kPrefillTraceTiles = 192;
inline constexpr int kPrefillTraceWords = kPrefillTraceHeader + 3 * kPrefillTraceTiles;

// ---- the static walk's units inside one request (prefill_tile_scheduler.cuh)
// Unit `local` (0 <= local < H units, units = ceil(M / 2)) of a request of
// M query blocks: head local / units, pair p = local % units, made of
// query blocks M - 1 - p (half 0, the long one) and p (half 1). Returns
// false when that half does not exist (M odd: the middle unit has only its
// long half).
LATTN_HOST_DEVICE constexpr bool prefill_unit_tile(int local, int m_blocks, int half, int& head, int& m_block) {
  const int units = (m_blocks + 1) / 2;
  const int pair = local % units;
  head = local / units;
  m_block = half == 0 ? m_blocks - 1 - pair : pair;
  return half == 0 || pair < m_blocks - 1 - pair;
}

// ---- the static walk's balanced tail ----------------------------------------------
// With U units over a grid of G CTAs, the round robin leaves a last, partial
// round of U mod G units while the other CTAs idle. The balanced walk deals
// the last G + U mod G units (one full round and the partial one) as single
// tiles instead, heaviest first (query block descending: under causal
// masking a tile's key blocks never decrease with its query block), in a
// snake: tile ranks 0..G-1 to CTAs 0..G-1, ranks G..2G-1 to CTAs G-1..0,
// and so on, so a CTA that drew a heavy tile in one round draws a light one
// in the next. Every CTA ran the same U div G - 1 units before, so the
// makespan comes close to the average (docs/hopper.md, "Scheduler").
// The tail is used only when it lies inside the walk's last request (the
// kernel checks), so all its tiles share one (request, M) and their order
// has the closed form below.

// Units of the tail: G + U mod G, or 0 (no tail) when U <= G or G divides U.
LATTN_HOST_DEVICE constexpr int prefill_tail_units(int units, int grid) {
  if (grid <= 0 || units <= grid || units % grid == 0) return 0;
  return grid + units % grid;
}

// Tiles of a tail that starts at unit `first_local` of a request of
// `num_heads` heads and M query blocks (running to its end): head h0's
// pairs p0.. (query blocks p0 .. M - 1 - p0) and every block of the
// heads after it.
LATTN_HOST_DEVICE constexpr int prefill_tail_tiles(int m_blocks, int num_heads, int first_local) {
  const int units = (m_blocks + 1) / 2;
  const int h0 = first_local / units, p0 = first_local % units;
  return (num_heads - 1 - h0) * m_blocks + (m_blocks - 2 * p0);
}

// Head and query block of tail tile `rank` (0 <= rank < prefill_tail_tiles),
// query block descending: blocks above M - 1 - p0 come in the K = H - 1 - h0
// full heads only, blocks p0 .. M - 1 - p0 in those and h0, blocks below p0
// in the full heads again.
LATTN_HOST_DEVICE constexpr void prefill_tail_tile(int rank, int m_blocks, int num_heads, int first_local, int& head,
                                                   int& m_block) {
  const int units = (m_blocks + 1) / 2;
  const int h0 = first_local / units, p0 = first_local % units;
  const int full = num_heads - 1 - h0;  // heads h0 + 1 .. H - 1
  const int top = full * p0;            // tiles of blocks M - p0 .. M - 1
  const int mid = (full + 1) * (m_blocks - 2 * p0);
  if (rank < top) {
    m_block = m_blocks - 1 - rank / full;
    head = h0 + 1 + rank % full;
  } else if (rank < top + mid) {
    const int j = rank - top;
    m_block = m_blocks - 1 - p0 - j / (full + 1);
    head = h0 + j % (full + 1);
  } else {
    const int j = rank - top - mid;
    m_block = p0 - 1 - j / full;
    head = h0 + 1 + j % full;
  }
}

// Whether the default static walk deals its tail so (an explicit
// static_balanced always does): only for causal launches whose key rows are
// at most twice their query rows, where a request's tiles range from one key
// block to M and the snake evens them out. Measured (docs/perf.md,
// "balanced tail"): 1-5 % faster than the plain pairs at 1 x 8192; with
// near-equal tiles — a non-causal context chunk, a causal launch over far
// more keys than queries (2048 x 34816) — it gains no round and was 1-4 %
// slower (fewer CTAs share a head's K/V at a time). The factor 2 is not
// tuned: those two ends are what was measured.
LATTN_HOST_DEVICE constexpr bool prefill_balanced_tail_helps(bool causal, long long q_rows, long long kv_rows) {
  return causal && kv_rows <= 2 * q_rows;
}

// The tail rank CTA `cta` takes in its `round`-th tail step (the snake).
LATTN_HOST_DEVICE constexpr int prefill_snake_rank(int cta, int round, int grid) {
  return round * grid + (round % 2 == 0 ? cta : grid - 1 - cta);
}

// ---- the dynamic walk's order inside one request (prefill_tile_scheduler.cuh)
// A request's M x H tiles (M query blocks, H heads) are numbered in
// sections of heads: sections of `per_section` heads, the last of which may
// be short, then one last section of `last_heads` heads; inside a section
// query block M - 1 first, each block over the section's heads.

// Heads per section: as many as `section_rows` key rows of K + V hold,
// 1..num_heads (section_rows 0: one).
LATTN_HOST_DEVICE constexpr int prefill_heads_per_section(int section_rows, int seqlen_k, int num_heads) {
  const int fit = section_rows / (seqlen_k > 1 ? seqlen_k : 1);
  return fit < 1 ? 1 : (fit > num_heads ? num_heads : fit);
}

// Heads of the request's last section: the remainder of the sections of
// per_section heads, and, for the walk's last request under causal masking
// (`tail`), at least enough heads that the work handed out after its
// heaviest tiles (block M - 1) keeps the other CTAs busy until those end:
// k heads leave k (M - 1) M / 2 blocks after them, and the other grid - 1
// CTAs need about M each, so k >= 2 (grid - 1) / (M - 1). (With one head,
// its block M - 1 would start only M tiles before the end of the launch:
// about half a tile of idle tail on every other CTA.)
LATTN_HOST_DEVICE constexpr int prefill_last_section_heads(int num_heads, int per_section, int m_blocks, bool tail,
                                                           int grid) {
  int k = per_section + num_heads % per_section;
  if (tail) {
    const int need = m_blocks > 1 ? (2 * (grid - 1) + m_blocks - 2) / (m_blocks - 1) : num_heads;
    k = need > k ? need : k;
  }
  return k < num_heads ? k : num_heads;
}

// Head and query block of position `local` (0 <= local < M H) of the order.
LATTN_HOST_DEVICE constexpr void prefill_section_tile(int local, int m_blocks, int num_heads, int per_section,
                                                      int last_heads, int& head, int& m_block) {
  const int front_heads = num_heads - last_heads;  // in sections of per_section (the last of them may be short)
  int head0 = front_heads, heads = last_heads, in_section = local - front_heads * m_blocks;
  if (local < front_heads * m_blocks) {
    const int section = local / (per_section * m_blocks);
    head0 = section * per_section;
    heads = front_heads - head0 < per_section ? front_heads - head0 : per_section;
    in_section = local - section * (per_section * m_blocks);
  }
  const int rank_m = in_section / heads;
  head = head0 + (in_section - rank_m * heads);
  m_block = m_blocks - 1 - rank_m;
}

}  // namespace lattn::cuda::sm90
