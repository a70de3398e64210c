// src/cuda/sm90/common/smem.cuh — shared-memory loads and stores by 32-bit
// .shared::cta address (PTX ISA "ld", "st" with the .shared state space), for
// code that runs with few registers (a producer warpgroup after setmaxnreg):
// a 32-bit address takes one register where a generic pointer takes two.
#pragma once

#include <cstdint>

namespace lattn::cuda::sm90 {

__device__ __forceinline__ int32_t ld_shared_s32(uint32_t addr) {
  int32_t v;
  asm volatile("ld.shared.s32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_s32(uint32_t addr, int32_t v) {
  asm volatile("st.shared.s32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

}  // namespace lattn::cuda::sm90
