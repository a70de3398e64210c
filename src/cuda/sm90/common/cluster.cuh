// src/cuda/sm90/common/cluster.cuh — thread-block clusters (sm_90): the
// CTA's rank in its cluster, the cluster-wide barrier, and arrivals on a
// peer CTA's mbarrier through distributed shared memory (PTX ISA "Cluster",
// "barrier.cluster", "mapa", "mbarrier.arrive" with .shared::cluster).
#pragma once

#include <cstdint>

#include "cuda/sm90/common/mbarrier.cuh"

namespace lattn::cuda::sm90 {

// %cluster_ctarank: this CTA's rank in its cluster (0 when launched without one).
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Every non-exited thread of the cluster arrives (release) and waits
// (acquire): orders barrier initialization before peers use the barriers,
// and keeps a CTA's shared memory alive until its peers are done with it.
// Warp-aligned: all threads of a warp call it together.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// mapa: the .shared::cluster address of the variable at .shared::cta address
// `addr` in the CTA of rank `rank`.
__device__ __forceinline__ uint32_t cluster_map_shared(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}

// One arrival (release at cluster scope) on the mbarrier at .shared::cluster
// address `bar` (a peer's, from cluster_map_shared, or this CTA's own).
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}

}  // namespace lattn::cuda::sm90
