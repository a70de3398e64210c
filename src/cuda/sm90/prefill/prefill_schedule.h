// src/cuda/sm90/prefill/prefill_schedule.h — how a Hopper prefill launch
// walks its tiles: the choice the caller makes and the kernel argument it
// becomes (internal; no CUDA header). The walks themselves are in
// prefill_tile_scheduler.cuh.
#pragma once

namespace lattn::cuda::sm90 {

enum class HopperPrefillSchedule {
  automatic,     // LATTN_HOPPER_PREFILL_SCHEDULE (read once: "dynamic" or "static"), else dynamic
  static_pairs,  // the static round robin over paired query blocks
  dynamic,       // heaviest first from an atomic tile counter
};

// The kernel argument.
struct PrefillSchedule {
  int* counter = nullptr;  // dynamic: this launch's tile counter (0 at the start); nullptr: static pairs
  int section_rows = 0;    // dynamic: key rows of one head's K + V that a section of heads may hold
};

}  // namespace lattn::cuda::sm90
