// src/cuda/sm90/prefill/prefill_trace.cuh — the diagnostic trace of a Hopper
// prefill launch (PrefillSchedule::trace, layout in prefill_schedule.h):
// which SM each CTA ran on, when it started and ended, the SM clock over its
// life (clock64 against %globaltimer) and when each of its tiles started.
// Written by the first thread of consumer warpgroup 0 only; every call is a
// test of a kernel parameter when tracing is off (every library launch).
// Used by bench/cuda_prefill_bench.cpp (LATTN_PREFILL_BENCH_TRACE) to find
// what makes the two speed levels of docs/perf.md.
#pragma once

#include <cstdint>

#include "cuda/sm90/prefill/prefill_schedule.h"

namespace lattn::cuda::sm90 {

struct PrefillTrace {
  static constexpr unsigned kTracer = 128;  // consumer warpgroup 0, thread 0

  __device__ static unsigned long long* slot(const PrefillSchedule& s) {
    return s.trace + uint64_t(blockIdx.x) * kPrefillTraceWords;
  }
  __device__ static unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
  __device__ static unsigned sm_id() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
  }

  __device__ static void begin(const PrefillSchedule& s) {
    if (s.trace == nullptr || threadIdx.x != kTracer) return;
    unsigned long long* w = slot(s);
    w[0] = sm_id();
    w[1] = now_ns();
    w[2] = static_cast<unsigned long long>(clock64());
  }
  // Tile `i` of this CTA (its Q has landed).
  __device__ static void tile(const PrefillSchedule& s, uint32_t i, int batch, int head, int m_block) {
    if (s.trace == nullptr || threadIdx.x != kTracer || i >= uint32_t(kPrefillTraceTiles)) return;
    unsigned long long* w = slot(s) + kPrefillTraceHeader + 3 * i;
    w[0] = now_ns();
    w[1] = static_cast<unsigned long long>(clock64());
    w[2] = (uint64_t(uint32_t(batch)) << 40) | (uint64_t(uint32_t(head)) << 20) | uint64_t(uint32_t(m_block));
  }
  __device__ static void end(const PrefillSchedule& s, uint32_t tiles) {
    if (s.trace == nullptr || threadIdx.x != kTracer) return;
    unsigned long long* w = slot(s);
    w[3] = now_ns();
    w[4] = static_cast<unsigned long long>(clock64());
    w[5] = tiles;
  }
};

}  // namespace lattn::cuda::sm90
