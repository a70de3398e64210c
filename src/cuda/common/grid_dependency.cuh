// src/cuda/common/grid_dependency.cuh — programmatic dependent launch (PTX
// ISA "griddepcontrol", sm_90+; CUDA programming guide "Programmatic
// Dependent Launch"). A kernel launched with the attribute
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the
// kernel before it on the stream still runs; it must call grid_dependency_wait()
// before it reads anything that kernel (or any earlier one) wrote, and the
// kernel before it lets it start early by calling grid_dependency_trigger().
// Without the attribute, or before sm_90, both are no-ops: kernels that call
// them behave as ordinary launches.
#pragma once

namespace lattn::cuda {

// Blocks until every kernel this one depends on has completed and its
// memory operations are visible.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel on the stream (launched with the attribute) start
// its CTAs as soon as every CTA of this one has called this or exited.
__device__ __forceinline__ void grid_dependency_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace lattn::cuda
