// src/cuda/sm80/decode/decode_kernel_launcher.h — the per-configuration
// launcher's declaration; its definition (decode_kernel_launcher_impl.cuh) is
// compiled only in the instantiation files.
#pragma once

#include <cuda_runtime.h>

#include "cuda/smxx/decode_params.h"

namespace lattn::cuda::sm80 {

template <class K>  // K = DecodeTraits<...>
struct DecodeKernelLauncher {
  // CTAs of the kernel that fit on one SM (sets its shared-memory limit first).
  static int ctas_per_sm();
  // Grid (m_tiles, p.plan.num_parts).
  static void launch(const DecodeParams& p, int m_tiles, cudaStream_t stream);
};

}  // namespace lattn::cuda::sm80
