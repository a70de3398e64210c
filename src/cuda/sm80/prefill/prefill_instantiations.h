// src/cuda/sm80/prefill/prefill_instantiations.h — the declaration every
// instantiation file (instantiations/*.cu) defines explicitly for one
// configuration index of kPrefillTileConfigs, one element type and both
// mask modes; the dispatch table (prefill_launch.cu) only references them,
// so each kernel is compiled once, in its own translation unit.
#pragma once

#include <cuda_runtime.h>

#include "cuda/sm80/prefill/prefill_params.h"

namespace lattn::cuda::sm80 {

template <int kConfig, class Element, bool kCausal>
void launch_prefill_kernel(const PrefillParams& params, cudaStream_t stream);

}  // namespace lattn::cuda::sm80
