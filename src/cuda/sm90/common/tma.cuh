// src/cuda/sm90/common/tma.cuh — device side of the bulk tensor copy engine
// (TMA): tiled global -> shared copies described by a tensor map
// (tma_host.h builds it), completing on an mbarrier with a transaction byte
// count (PTX ISA: "Data Movement and Conversion Instructions:
// cp.async.bulk.tensor", "prefetch.tensormap", "Memory Consistency Model:
// fence.proxy.async").
//
// Usage: the tensor map is a `const __grid_constant__ CUtensorMap` kernel
// parameter; one thread calls mbarrier_arrive_expect_tx(bar, bytes of all the
// boxes) and issues the copies; consumers wait on the barrier's phase. The
// destination must be aligned to 128 bytes (1024 for the 128-byte swizzle,
// whose pattern repeats every 8 rows of 128 bytes). Coordinates are in
// elements, innermost dimension first, and may be negative or past the end:
// out-of-bounds elements are filled with zeros.
//
// Plain sm_90 instructions.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only; nothing links libcuda)

#include <cstdint>

#include "cuda/sm90/common/mbarrier.cuh"

namespace lattn::cuda::sm90 {

// L2 cache-policy hints for .L2::cache_hint (the 64-bit createpolicy
// encodings CUTLASS also uses for its TMA::CacheHintSm90).
enum class CacheHint : uint64_t {
  kEvictNormal = 0x1000000000000000ull,
  kEvictFirst = 0x12F0000000000000ull,  // streamed data read once (KV tiles)
  kEvictLast = 0x14F0000000000000ull,   // data re-read by other CTAs
};

__device__ __forceinline__ uint64_t tmap_ptr(const CUtensorMap* map) { return reinterpret_cast<uint64_t>(map); }

// prefetch.tensormap: pull the descriptor into the cache before first use.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(tmap_ptr(map)) : "memory");
}

// fence.proxy.async.shared::cta: orders this thread's generic-proxy shared
// memory accesses (ordinary stores) with later async-proxy accesses (TMA,
// wgmma operand reads) — needed before a barrier after which wgmma reads data
// written with st.shared, or TMA overwrites data last touched by st.shared.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// cp.async.bulk.tensor.{2..5}d.shared::cluster.global.mbarrier::complete_tx::bytes
// [dst], [map, {c0, ...}], [bar] (optionally .L2::cache_hint). Coordinates in
// elements, innermost first.
#define LATTN_TMA_LOAD(NDIM, COORD_STR, ...)                                                 \
  asm volatile("cp.async.bulk.tensor." #NDIM                                                 \
               "d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, " COORD_STR \
               "], [%2];" ::"r"(smem_u32(dst)),                                              \
               "l"(tmap_ptr(map)), "r"(smem_u32(bar)), __VA_ARGS__                           \
               : "memory")
#define LATTN_TMA_LOAD_HINT(NDIM, COORD_STR, HINT_STR, ...)                            \
  asm volatile("cp.async.bulk.tensor." #NDIM                                           \
               "d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"  \
               " [%0], [%1, " COORD_STR "], [%2], " HINT_STR ";" ::"r"(smem_u32(dst)), \
               "l"(tmap_ptr(map)), "r"(smem_u32(bar)), __VA_ARGS__                     \
               : "memory")

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  LATTN_TMA_LOAD(2, "{%3, %4}", "r"(c0), "r"(c1));
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2) {
  LATTN_TMA_LOAD(3, "{%3, %4, %5}", "r"(c0), "r"(c1), "r"(c2));
}
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3) {
  LATTN_TMA_LOAD(4, "{%3, %4, %5, %6}", "r"(c0), "r"(c1), "r"(c2), "r"(c3));
}
__device__ __forceinline__ void tma_load_5d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3, int c4) {
  LATTN_TMA_LOAD(5, "{%3, %4, %5, %6, %7}", "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4));
}

// With an L2 eviction-priority hint (CacheHint).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            CacheHint hint) {
  LATTN_TMA_LOAD_HINT(2, "{%3, %4}", "%5", "r"(c0), "r"(c1), "l"(uint64_t(hint)));
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2,
                                            CacheHint hint) {
  LATTN_TMA_LOAD_HINT(3, "{%3, %4, %5}", "%6", "r"(c0), "r"(c1), "r"(c2), "l"(uint64_t(hint)));
}
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3, CacheHint hint) {
  LATTN_TMA_LOAD_HINT(4, "{%3, %4, %5, %6}", "%7", "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(uint64_t(hint)));
}
__device__ __forceinline__ void tma_load_5d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3, int c4, CacheHint hint) {
  LATTN_TMA_LOAD_HINT(5, "{%3, %4, %5, %6, %7}", "%8", "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
                      "l"(uint64_t(hint)));
}

// 3D load with the destination and the barrier as 32-bit .shared::cta
// addresses (for a producer running with few registers).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::
          "r"(dst),
      "l"(tmap_ptr(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

#undef LATTN_TMA_LOAD
#undef LATTN_TMA_LOAD_HINT

// Byte offset of element (row, col) of a [rows][64] 16-bit box stored by TMA
// with CU_TENSOR_MAP_SWIZZLE_128B at a 1024-byte aligned address: rows are 128
// bytes, and 16-byte chunk c of row r lands at chunk c ^ (r % 8) (address bits
// [4:6] XOR bits [7:9]). For code that writes or reads such tiles with ordinary
// loads/stores (e.g. a Q tile built without TMA) in the layout wgmma expects.
__host__ __device__ __forceinline__ uint32_t swizzle128_offset(uint32_t row, uint32_t col_elem16) {
  const uint32_t chunk = col_elem16 / 8, within = col_elem16 % 8;
  return row * 128u + (((chunk ^ (row % 8u)) * 16u) | (within * 2u));
}

}  // namespace lattn::cuda::sm90
