// src/cuda/sm90/prefill/prefill_instantiations.h — the launcher template that
// every instantiation file (instantiations/*.cu) defines explicitly for one
// configuration, one element type and both mask modes; the dispatch table
// (prefill_launch.cu) only references them.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/sm80/prefill/prefill_params.h"
#include "cuda/sm90/prefill/prefill_schedule.h"

namespace lattn::cuda::sm90 {

template <int kConfig, class Element, bool kCausal>
void launch_hopper_prefill_kernel(const sm80::PrefillParams& params, const PrefillSchedule& schedule,
                                  const CUtensorMap& tmap_q, const CUtensorMap& tmap_k, const CUtensorMap& tmap_v,
                                  cudaStream_t stream);

}  // namespace lattn::cuda::sm90
