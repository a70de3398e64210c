// src/cuda/sm90/prefill/prefill_launch_kernel.cuh — the launcher of one Hopper
// prefill kernel instance (included by the instantiation files only).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "cuda/common/context.h"
#include "cuda/common/cuda_check.h"
#include "cuda/sm90/prefill/prefill_instantiations.h"
#include "cuda/sm90/prefill/prefill_kernel.cuh"
#include "lattn/errors.h"

namespace lattn::cuda::sm90 {

template <int kConfig, class Element, bool kCausal>
void launch_hopper_prefill_kernel(const sm80::PrefillParams& params, const PrefillSchedule& schedule,
                                  const CUtensorMap& tmap_q, const CUtensorMap& tmap_k, const CUtensorMap& tmap_v,
                                  cudaStream_t stream) {
  using Traits = HopperPrefillTraits<kConfig, Element>;
  using Scheduler = PrefillTileScheduler<Traits::kBlockM, Traits::kBlockN, kCausal>;
  auto* kernel = &hopper_prefill_kernel<Traits, kCausal>;

  // Work items of the walk: tiles (dynamic) or pairs of tiles (static); an
  // upper bound of what the CTAs find (exact past kMaxSortedRequests).
  const long long units = schedule.counter != nullptr ? Scheduler::max_tiles(params) : Scheduler::max_units(params);
  if (units == 0) return;
  if (Scheduler::max_tiles(params) > 0x3fffffffLL) {
    throw ValueError("hopper prefill attention: " + std::to_string(Scheduler::max_tiles(params)) +
                     " tiles exceed 2^30 - 1");
  }
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  const DeviceContext& ctx = device_context(device);

  // Opt in to more than 48 KB of dynamic shared memory, once per device.
  static std::atomic<uint64_t> configured_devices{0};
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (bit == 0 || !(configured_devices.load(std::memory_order_relaxed) & bit)) {
    if (ctx.max_smem_per_block_optin < Traits::kSmemBytes) {
      throw RuntimeError(std::string("hopper prefill attention: kernel ") + Traits::kCfg.name + " needs " +
                         std::to_string(Traits::kSmemBytes) + " bytes of shared memory per block, device " +
                         std::to_string(device) + " offers " + std::to_string(ctx.max_smem_per_block_optin));
    }
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
    configured_devices.fetch_or(bit, std::memory_order_relaxed);
  }

  // Persistent: one CTA per SM at most (the tiles fill an SM's shared memory).
  const int ctas = schedule.max_ctas > 0 ? std::min(schedule.max_ctas, ctx.sm_count) : ctx.sm_count;
  const unsigned grid = static_cast<unsigned>(std::min<long long>(units, ctas));
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params, schedule, tmap_q, tmap_k, tmap_v);
  LATTN_CUDA_CHECK_LAUNCH("hopper_prefill_kernel");
}

}  // namespace lattn::cuda::sm90
