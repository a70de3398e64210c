// src/cuda/sm80/prefill/prefill_launch_kernel.cuh — the launcher of one prefill
// kernel instance (included by the instantiation files only).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/sm80/prefill/prefill_instantiations.h"
#include "cuda/sm80/prefill/prefill_kernel.cuh"
#include "lattn/errors.h"

namespace lattn::cuda::sm80 {

template <int kConfig, class Element, bool kCausal>
void launch_prefill_kernel(const PrefillParams& params, cudaStream_t stream) {
  using Traits = PrefillKernelTraits<kConfig, Element>;
  using Scheduler = PrefillTileScheduler<Traits::kBlockM>;
  auto* kernel = &prefill_attention_kernel<Traits, kCausal>;

  const long long ctas = Scheduler::num_ctas(params);
  if (ctas == 0) return;
  if (ctas > 0x7fffffffLL) {
    throw ValueError("prefill attention: " + std::to_string(ctas) + " CTAs exceed the 1-D grid limit (2^31 - 1)");
  }

  // Opt in to more than 48 KB of dynamic shared memory, once per device.
  static std::atomic<uint64_t> configured_devices{0};
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (bit == 0 || !(configured_devices.load(std::memory_order_relaxed) & bit)) {
    int optin = 0;
    LATTN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (optin < Traits::kSmemBytes) {
      throw RuntimeError(std::string("prefill attention: kernel ") + kPrefillTileConfigs[kConfig].name + " needs " +
                         std::to_string(Traits::kSmemBytes) + " bytes of shared memory per block, device " +
                         std::to_string(device) + " offers " + std::to_string(optin));
    }
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          int(cudaSharedmemCarveoutMaxShared)));
    configured_devices.fetch_or(bit, std::memory_order_relaxed);
  }

  kernel<<<static_cast<unsigned>(ctas), Traits::kThreads, Traits::kSmemBytes, stream>>>(params);
  LATTN_CUDA_CHECK_LAUNCH("prefill_attention_kernel");
}

}  // namespace lattn::cuda::sm80
