// bench/harness/case_step.h — builds one case's inputs and backend, and
// returns the step to time (internal to the harness; public API only).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "harness/bench_case.h"
#include "lattn/tensor.h"

namespace lattn::bench {

// Everything the step needs is owned by the returned function. Calling it
// runs one step of the case: prefill = prepare_metadata, the causal
// new-token attention, every context chunk's attention and the LSE merges
// that combine them (merge_attn_states, as MlaAttention runs them); decode =
// prepare_metadata and run.
std::function<void()> build_case_step(const BenchCase& c, uint64_t seed);

// The step and what runs inside the case's backend, in words: kernel_label()
// is the backend instance's (lattn/backend.h), so after run() it names the
// kernels and plan that the step used (a CUDA decode's tiles and split-KV parts).
struct CaseStep {
  std::function<void()> run;
  std::function<std::string()> kernel_label;
  // The step's attention output (prefill [T, N, V] merged; decode [T, N, L]),
  // what tests compare across seeds (the seed fixes every input).
  std::function<Tensor()> output;
};
CaseStep build_case(const BenchCase& c, uint64_t seed);

}  // namespace lattn::bench
