// bench/harness/case_step.h — builds one case's inputs and backend, and
// returns the step to time (internal to the harness; public API only).
#pragma once

#include <cstdint>
#include <functional>

#include "harness/bench_case.h"

namespace lattn::bench {

// Everything the step needs is owned by the returned function. Calling it
// runs one step of the case: prefill = prepare_metadata, the causal
// new-token attention, every context chunk's attention and the LSE merges
// that combine them (merge_attn_states, as MlaAttention runs them); decode =
// prepare_metadata and run.
std::function<void()> build_case_step(const BenchCase& c, uint64_t seed);

}  // namespace lattn::bench
