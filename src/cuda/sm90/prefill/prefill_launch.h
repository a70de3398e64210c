// src/cuda/sm90/prefill/prefill_launch.h — the host entry point of the Hopper
// (sm_90a) prefill attention kernel (internal; plain C++, usable from tests
// and benchmarks).
#pragma once

#include <cstdint>

#include "cuda/sm80/prefill/prefill_params.h"
#include "cuda/sm90/prefill/prefill_config.h"
#include "cuda/sm90/prefill/prefill_schedule.h"
#include "lattn/stream.h"

namespace lattn::cuda::sm90 {

// True when this build contains the sm_90a kernels (LATTN_CUDA_ARCHS holds 90a).
bool hopper_prefill_compiled();

// Runs varlen prefill attention (the contract of sm80::PrefillParams) with
// the sm_90a kernel on `stream` (asynchronous). q_rows: rows of q and out;
// kv_rows: rows of k and v (the tensor maps' bounds). config: a row of
// kHopperPrefillConfigs whose dims match, or -1 for the default row of the
// params' dims. The current device must be compute capability 9.0. Throws ValueError for unsupported dims, pointers or
// strides the copy engine cannot address (16-byte alignment, strides
// multiples of 8 elements) and RuntimeError for a device that is not sm90 or
// a CUDA failure; nothing is launched then. schedule: how the persistent
// CTAs walk the tiles (prefill_schedule.h; the dynamic walk falls back to
// the static one while `stream` is being captured into a CUDA graph before
// the device's tile counters exist: reserve_hopper_prefill_counters).
// max_ctas: at most this many persistent CTAs (0: one per SM; tests use a
// small grid to walk many rounds on small problems). diagnostics: see
// HopperPrefillDiagnostics (benchmarks and tests; nullptr: none).
struct HopperPrefillDiagnostics;
void run_hopper_prefill_attention(const sm80::PrefillParams& params, int64_t q_rows, int64_t kv_rows, Stream stream,
                                  int config = -1, HopperPrefillSchedule schedule = HopperPrefillSchedule::automatic,
                                  int max_ctas = 0, const HopperPrefillDiagnostics* diagnostics = nullptr);

// Diagnostics of one launch (benchmarks and tests; the library passes
// none). trace: a device buffer of grid x kPrefillTraceWords words that the
// launch fills (PrefillSchedule::trace, prefill_schedule.h; grid =
// min(SMs, max_ctas) at most).
struct HopperPrefillDiagnostics {
  unsigned long long* trace = nullptr;
};

// Allocates the tile counters of the dynamic walk on `device` if they do
// not exist yet (4 KB, kept until the process ends). The backend calls it
// when it is created, so that no allocation happens later, while a CUDA
// graph may be being captured.
void reserve_hopper_prefill_counters(int device);

// Testing: true when every tile counter of the current device is 0 (each
// dynamic launch leaves its counter at 0 when it completes); synchronizes
// the device. True when the counters were never allocated.
bool hopper_prefill_counters_idle();

}  // namespace lattn::cuda::sm90
