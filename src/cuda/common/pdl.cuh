// src/cuda/common/pdl.cuh — programmatic dependent launch (sm90+) from the
// device side. A kernel launched with the programmatic-stream-serialization
// attribute may start before the kernel ahead of it on the stream has
// finished; it must call pdl_wait() before it reads anything that kernel
// writes (pdl_wait returns once that kernel has completed and its memory is
// visible). A kernel calls pdl_launch_dependents() to let the next kernel
// start early (its CTAs then wait in pdl_wait). Below sm90 both are no-ops,
// and on a kernel launched without the attribute pdl_wait returns at once.
#pragma once

namespace lattn::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace lattn::cuda
