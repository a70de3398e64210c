// src/cuda/sm90/prefill/prefill_kernel.cuh — the Hopper (sm_90a) varlen
// prefill attention kernel: FlashAttention's online softmax on warpgroup MMAs
// fed by the bulk tensor copy engine (roles and memory map in
// prefill_traits.cuh, the walk over tiles in prefill_tile_scheduler.cuh).
//
// Per tile (request, head, 128 query rows), consumer warpgroup wg (64 rows;
// its rows of Q land on their own barrier): for key block n = last .. 0 (the
// diagonal / ragged end first), FlashAttention-3's intra-warpgroup
// pipelining: after the first block, each step issues S = Q K[n]ᵀ and then
// O += P[n+1] V[n+1] as two wgmma groups, waits for the first, releases K[n]
// (last block: and wg's rows of Q), masks (only blocks crossing the keys' end
// or the causal diagonal), runs block n's softmax on the CUDA cores while the
// tensor cores finish P V, then rescales O and packs P[n]; the last P V runs
// alone; then O / row sum and LSE -> global.
// A warpgroup whose rows see none of a block's keys skips its math but still
// waits for the block's copies before releasing the stage, so no warpgroup
// runs ahead of the barrier phases. The V tiles of the diagonal block and of
// the block crossing the keys' end are cleaned by producer warps 1..3 before
// any P V reads them (PrefillMainloop::fix_v; the consumers wait on v_ready
// for those blocks).
//
// The body is compiled for sm_90a only (wgmma, setmaxnreg); other targets
// get an empty kernel that the launcher never starts.
#pragma once

#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/sm90/common/mbarrier.cuh"
#include "cuda/sm90/common/tma.cuh"
#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/prefill/prefill_consumer_stream.cuh"
#include "cuda/sm90/prefill/prefill_consumer_tile.cuh"
#include "cuda/sm90/prefill/prefill_mainloop.cuh"
#include "cuda/sm90/prefill/prefill_tile_scheduler.cuh"
#include "cuda/sm90/prefill/prefill_traits.cuh"

namespace lattn::cuda::sm90 {

template <class Traits, bool kCausal>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    hopper_prefill_kernel(const __grid_constant__ PrefillParams params, const __grid_constant__ CUtensorMap tmap_q,
                          const __grid_constant__ CUtensorMap tmap_k, const __grid_constant__ CUtensorMap tmap_v) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Mainloop = PrefillMainloop<Traits, kCausal>;
  using Scheduler = typename Mainloop::Scheduler;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  auto* bars = reinterpret_cast<PrefillBarriers*>(smem + Traits::kSmemBarriers);
  const uint32_t order = smem_u32(smem + Traits::kSmemOrder);  // the longest-first table

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&tmap_q);
    tma_prefetch_descriptor(&tmap_k);
    tma_prefetch_descriptor(&tmap_v);
    for (int w = 0; w < Traits::kConsumerWarpgroups; ++w) {
      mbarrier_init(&bars->q_full[w], 1);
      mbarrier_init(&bars->q_empty[w], Traits::kConsumerWarps / Traits::kConsumerWarpgroups);
    }
    for (int s = 0; s < Traits::kStages; ++s) {
      mbarrier_init(&bars->k_full[s], 1);
      mbarrier_init(&bars->v_full[s], 1);
      mbarrier_init(&bars->v_ready[s], Traits::kFixThreads);
      mbarrier_init(&bars->k_empty[s], Traits::kConsumerWarps);
      mbarrier_init(&bars->v_empty[s], Traits::kConsumerWarps + Traits::kFixThreads);
    }
    fence_barrier_init();
  }
  Scheduler::build_order(params, *reinterpret_cast<PrefillRequestOrder*>(smem + Traits::kSmemOrder), int(threadIdx.x),
                         Traits::kThreads);
  __syncthreads();

  const int wg = warpgroup_index();
  if (wg == 0) {
    setmaxnreg_dec<Traits::kProducerRegs>();
    if (threadIdx.x == 0) {
      Mainloop::produce(params, &tmap_q, &tmap_k, &tmap_v, smem_u32(smem), smem_u32(bars), order);
    } else if (threadIdx.x >= 32 && threadIdx.x < 32 + Traits::kFixThreads) {
      Mainloop::fix_v(smem_u32(smem), smem_u32(bars), int(threadIdx.x) - 32);
    }
  } else {
    setmaxnreg_inc<Traits::kConsumerRegs>();
    if constexpr (Traits::kStream) {
      PrefillConsumerStream<Traits, kCausal>::run(params, smem, bars, order, wg);
    } else {
      PrefillConsumerTile<Traits, kCausal>::run(params, smem, bars, order, wg);
    }
  }
#endif
}

}  // namespace lattn::cuda::sm90
