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
  automatic,     // LATTN_HOPPER_PREFILL_SCHEDULE (read once: "dynamic" or "static"), else static
  static_pairs,  // the static round robin over paired query blocks
  dynamic,       // heaviest first from an atomic tile counter
};

// The kernel argument.
struct PrefillSchedule {
  int* counter = nullptr;  // dynamic: this launch's tile counter (0 at the start); nullptr: static pairs
  int section_rows = 0;    // dynamic: key rows of one head's K + V that a section of heads may hold
};

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
