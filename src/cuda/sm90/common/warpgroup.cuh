// src/cuda/sm90/common/warpgroup.cuh — warpgroup roles: indices, register
// reallocation (setmaxnreg, sm_90a; PTX ISA "setmaxnreg") and named barriers
// (PTX ISA "bar.sync / barrier.sync" with a barrier id and thread count).
#pragma once

#include <cstdint>

namespace lattn::cuda::sm90 {

constexpr int kWarpgroupThreads = 128;

// Which warpgroup of the CTA this thread belongs to (uniform across a warp,
// read through a shuffle so the compiler knows it).
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpgroupThreads, 0);
}
// Thread index within its warpgroup (0..127).
__device__ __forceinline__ int warpgroup_thread() { return int(threadIdx.x) % kWarpgroupThreads; }
// Warp index within its warpgroup (0..3).
__device__ __forceinline__ int warp_in_warpgroup() { return (int(threadIdx.x) / 32) % 4; }

// setmaxnreg: the calling warpgroup releases registers down to / requests up
// to kRegs per thread (a multiple of 8 in [24, 256]). Effective only when the
// kernel has a register cap at entry (__launch_bounds__(threads, 1)) and every
// warp of the warpgroup executes it (each role one branch of an if/else).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// Named barriers 1..15 (0 is __syncthreads). `threads` is a multiple of 32;
// every participating warp calls sync (or some call arrive, which does not wait).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace lattn::cuda::sm90
