// src/cuda/sm90/common/cta_smem.cuh — the dynamic shared memory of a
// warp-specialized Hopper attention kernel (the dense decode, the fp8 decode
// and the sparse kernel), cut at the byte offsets of its traits K.
//
// The base is rounded up to 1024 bytes: the dynamic window is only
// guaranteed 16-byte aligned, and the 128-byte swizzle that TMA writes and
// wgmma reads repeats every 1024 bytes (K::kSmemBytes reserves the 1024 more).
// It is rounded by adding an offset to the shared array itself, never through
// an integer cast of the pointer: a pointer rebuilt from an integer loses the
// shared address space, and every access through it compiles to a generic
// load or store (LD.E / ST.E, a longer path than LDS / STS; docs/perf.md,
// "Shared memory through generic pointers").
// Every such kernel has a Q tile, a ring of kStages KV tiles with a `full`
// and an `empty` mbarrier per stage, a P tile and the row max / row sum
// exchange buffers; what else it has it reads with at<U>(K::kSomeOffset).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/sm90/common/mbarrier.cuh"

namespace lattn::cuda::sm90 {

template <class K>
struct CtaSmem {
  uint8_t* base;    // 1024-byte aligned
  uint8_t* q;       // K::kQOffset
  uint8_t* kv;      // K::kKVOffset: stage s at kv + s * (the tile's bytes)
  uint8_t* p;       // K::kPOffset
  float* row_max;   // K::kRowMaxOffset
  float* row_sum;   // K::kRowSumOffset
  uint64_t* full;   // [K::kStages] at K::kBarrierOffset: a stage's tile has landed
  uint64_t* empty;  // [K::kStages] after them: a stage's tile has been read

  __device__ __forceinline__ explicit CtaSmem(uint8_t* raw)
      : base(raw + ((1024u - (smem_u32(raw) & 1023u)) & 1023u)),
        q(base + K::kQOffset),
        kv(base + K::kKVOffset),
        p(base + K::kPOffset),
        row_max(at<float>(K::kRowMaxOffset)),
        row_sum(at<float>(K::kRowSumOffset)),
        full(at<uint64_t>(K::kBarrierOffset)),
        empty(full + K::kStages) {}

  template <class U>
  __device__ __forceinline__ U* at(size_t offset) const {
    return reinterpret_cast<U*>(base + offset);
  }

  // Thread 0 initializes the ring's barriers (`full_arrivals` and
  // `empty_arrivals` arrivals complete a phase), then the whole CTA syncs, so
  // nobody waits on a barrier before it exists.
  __device__ __forceinline__ void init_ring(uint32_t full_arrivals, uint32_t empty_arrivals) const {
    if (threadIdx.x == 0) {
      for (int s = 0; s < K::kStages; ++s) {
        mbarrier_init(&full[s], full_arrivals);
        mbarrier_init(&empty[s], empty_arrivals);
      }
      fence_barrier_init();
    }
    __syncthreads();
  }
};

}  // namespace lattn::cuda::sm90
