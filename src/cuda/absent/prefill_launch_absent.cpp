// The sm80 prefill entry point for builds without CUDA (src/cuda/absent/ is compiled only there),
// and the sm90 one: each refuses with one
// sentence, so tests and benchmarks that reach for it link everywhere and
// skip cleanly (they check for a device first).
#include "cuda/sm80/prefill/prefill_launch.h"
#include "cuda/sm90/prefill/prefill_launch.h"
#include "lattn/errors.h"

namespace lattn::cuda::sm80 {

void run_prefill_attention(const PrefillParams&, Stream, int) {
  throw ValueError("prefill attention: lattn was built without CUDA");
}

}  // namespace lattn::cuda::sm80

namespace lattn::cuda::sm90 {

bool hopper_prefill_compiled() { return false; }

void run_hopper_prefill_attention(const sm80::PrefillParams&, int64_t, int64_t, Stream, int, HopperPrefillSchedule, int,
                                  const HopperPrefillDiagnostics*) {
  throw ValueError("hopper prefill attention: lattn was built without CUDA");
}

void reserve_hopper_prefill_counters(int) {}

bool hopper_prefill_counters_idle() { return true; }

}  // namespace lattn::cuda::sm90
