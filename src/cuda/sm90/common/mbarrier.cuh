// src/cuda/sm90/common/mbarrier.cuh — thin wrappers over the shared-memory
// transaction barrier (`mbarrier`, PTX ISA "Parallel Synchronization and
// Communication Instructions: mbarrier"), as Hopper kernels use it to wait for
// bulk tensor copies (TMA) and to hand buffers between producer and consumer
// warps.
//
// A barrier is one 8-byte word in shared memory. Phases: it completes a phase
// when its pending arrival count reaches zero AND its transaction byte count
// (raised by expect_tx, lowered by the copy engine's complete_tx) is zero; the
// waiting side tracks the phase parity (0, 1, 0, ...) it waits for.
//
// Plain sm_90 instructions (no sm_90a feature); callers guard sm90-only code.
#pragma once

#include <cstdint>

namespace lattn::cuda::sm90 {

// Shared-memory address (32-bit, .shared::cta window) of a generic pointer.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// mbarrier.init: `count` arrivals complete a phase (PTX ISA: mbarrier.init).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

// Makes initialized barriers visible to the async proxy (the copy engine) and
// to the other threads: one thread initializes, fences, then a __syncthreads
// (PTX ISA: fence.mbarrier_init).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// The barrier operations by 32-bit .shared::cta address: one register
// instead of a generic pointer's two, for code running after setmaxnreg.dec.
// The uint64_t* overloads below convert and call these.

// mbarrier.arrive (release, CTA scope): one arrival, no transaction bytes.
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// One arrival per warp: the warp's lanes meet (__syncwarp orders their
// earlier accesses before lane 0's release), then lane 0 arrives; a barrier
// released this way counts warps, not threads (32 times fewer arrivals on
// one address; measured neutral on the decode rows, docs/perf.md, "Per-warp
// stage release and a uniform warpgroup index").
__device__ __forceinline__ void mbarrier_arrive_per_warp(uint32_t bar) {
  __syncwarp();
  if (threadIdx.x % 32 == 0) mbarrier_arrive(bar);
}

// mbarrier.arrive.expect_tx: one arrival, and the phase also waits for `bytes`
// transaction bytes (the bulk copies issued against this barrier).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// One mbarrier.try_wait.parity probe (acquire, CTA scope): true once the
// phase with parity `parity` has completed. try_wait (unlike test_wait) may
// suspend the thread for a system-dependent time before returning false.
__device__ __forceinline__ bool mbarrier_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      " .reg .pred p;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Blocks until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  while (!mbarrier_try_wait(bar, parity)) {}
}

// The same for a thread with nothing else to do meanwhile (a producer
// waiting for a free stage): try_wait with a suspend-time hint, so the
// thread sleeps until the phase completes (or the hint, in ns, runs out)
// instead of probing every few cycles; the probes of the plain wait took
// issue slots of the consumer warps sharing its scheduler (about a tenth
// of the fp8 decode kernel's instructions; docs/perf.md).
__device__ __forceinline__ void mbarrier_wait_sleeping(uint32_t bar, uint32_t parity) {
  constexpr uint32_t kSuspendNs = 1000000;
  uint32_t done;
  do {
    asm volatile(
        "{\n"
        " .reg .pred p;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
        " selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity), "r"(kSuspendNs)
        : "memory");
  } while (done == 0);
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) { mbarrier_arrive(smem_u32(bar)); }
__device__ __forceinline__ void mbarrier_arrive_per_warp(uint64_t* bar) { mbarrier_arrive_per_warp(smem_u32(bar)); }
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  mbarrier_arrive_expect_tx(smem_u32(bar), bytes);
}
__device__ __forceinline__ bool mbarrier_try_wait(uint64_t* bar, uint32_t parity) {
  return mbarrier_try_wait(smem_u32(bar), parity);
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) { mbarrier_wait(smem_u32(bar), parity); }
__device__ __forceinline__ void mbarrier_wait_sleeping(uint64_t* bar, uint32_t parity) {
  mbarrier_wait_sleeping(smem_u32(bar), parity);
}

// mbarrier.expect_tx without arriving (PTX ISA: mbarrier.expect_tx).
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// mbarrier.inval before the memory is reused for something else.
__device__ __forceinline__ void mbarrier_inval(uint64_t* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}

}  // namespace lattn::cuda::sm90
