// src/cuda/sm90/prefill/prefill_traits.cuh — every compile-time decision of
// the Hopper prefill kernel: roles, tile shapes, the shared-memory map and
// the barrier set.
//
// Roles (3 warpgroups, 384 threads, one CTA per SM):
//   warpgroup 0  producer: one thread issues the bulk tensor copies (TMA) of
//                Q once per tile and K/V per key block; its warps 1..3 clean
//                the V blocks that hold keys some rows must not see (see
//                PrefillMainloop::fix_v); the warpgroup gives its registers
//                to the consumers (setmaxnreg).
//   warpgroups 1, 2  consumers: 64 query rows each of the 128-row Q tile;
//                S = Q Kᵀ (wgmma, A and B from shared memory), online softmax
//                in f32 registers, O += P V (wgmma, P from registers, V read
//                N-major from shared memory).
//
// Shared memory (every tile 1024-byte aligned, 128-byte swizzle, [rows][64]
// boxes of 16-bit elements, 128 bytes a row):
//   Q      kQBoxes boxes of [kBlockM][64]                       (48 KB at qk 192)
//   K[s]   kQBoxes boxes of [kBlockN][64], s < kStages          (48 KB each)
//   V[s]   kVBoxes boxes of [kBlockN][64]                       (32 KB each)
//   barriers (8 bytes each, see PrefillBarriers)
//   the longest-first order of the requests (PrefillRequestOrder, 2 KB)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/sm90/prefill/prefill_config.h"
#include "cuda/sm90/prefill/prefill_tile_scheduler.cuh"

namespace lattn::cuda::sm90 {

// The mbarriers of the pipeline (all in shared memory).
struct PrefillBarriers {
  uint64_t q_full;      // Q tile landed (1 arrival + transaction bytes)
  uint64_t q_empty;     // every consumer warp is done with Q (kConsumerWarps arrivals)
  uint64_t k_full[2];   // K[s] landed
  uint64_t v_full[2];   // V[s] landed
  uint64_t v_ready[2];  // V[s] cleaned by the fixer warps (only blocks that need it; kFixThreads arrivals)
  uint64_t k_empty[2];  // every consumer warp is done with K[s]
  uint64_t v_empty[2];  // every consumer warp and every fixer thread is done with V[s]
  // What the fixer warps do with the block in V[s], written by the producer
  // before it arms v_full[s]: PrefillMainloop::kFixNone, kFixStop, or
  // sanitize_from | zero_from << 16.
  int32_t v_fix[2];
  // The tile whose Q the producer loads next (batch, head, m_block; batch
  // -1: no more tiles), written before it arms q_full and read by one lane
  // of each consumer warp after q_full (the next write waits for q_empty).
  alignas(16) int32_t tile[4];
};

template <int kConfig, class Element_>
struct HopperPrefillTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, __nv_bfloat16> || std::is_same_v<Element, __half>,
                "the Hopper prefill kernel takes bf16 or f16");
  static constexpr bool kBf16 = std::is_same_v<Element, __nv_bfloat16>;
  static constexpr HopperPrefillConfig kCfg = kHopperPrefillConfigs[kConfig];

  static constexpr int kHeadDimQK = kCfg.head_dim_qk;
  static constexpr int kHeadDimV = kCfg.head_dim_v;
  static constexpr int kBlockM = kCfg.block_m;
  static constexpr int kBlockN = kCfg.block_n;
  static constexpr int kStages = kCfg.stages;
  static constexpr bool kOverlap = kCfg.overlap;
  static constexpr bool kPingPong = kCfg.pingpong;
  static constexpr bool kWideStores = kCfg.wide_stores;
  static_assert(!kWideStores || kHeadDimV % 32 == 0, "wide stores move 32 columns per group");
  static_assert(!kPingPong || kOverlap, "ping-pong is built on the overlapped consumer");

  // Named barriers kTurnBarrier + wg: "consumer warpgroup wg may issue" (both
  // consumer warpgroups, 256 threads).
  static constexpr int kTurnBarrier = 3;

  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kRowsPerWarpgroup = kBlockM / kConsumerWarpgroups;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
  static constexpr int kConsumerWarps = 4 * kConsumerWarpgroups;
  // Producer warps 1..3 clean V tiles (warp 0 holds the thread that issues the copies).
  static constexpr int kFixWarps = kCfg.fix_warps;
  static constexpr int kFixThreads = 32 * kFixWarps;
  static_assert(kFixWarps >= 1 && kFixWarps <= 3, "fixer warps are producer warps 1..3");
  // setmaxnreg: 128 x 40 + 256 x 232 = 64512 of the SM's 65536 registers
  // (the 168 per thread the launch allocates). The producer warpgroup walks
  // the longest-first table and computes each block's V cleaning with 40;
  // with 24 (and consumers at 240) ptxas spilled in the producer's code.
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;

  static constexpr int kBoxCols = 64;  // 128 bytes of 16-bit elements: the 128-byte swizzle's row
  static constexpr int kQBoxes = kHeadDimQK / kBoxCols;
  static constexpr int kVBoxes = kHeadDimV / kBoxCols;
  static_assert(kHeadDimQK % kBoxCols == 0 && kHeadDimV % kBoxCols == 0, "head dims must be multiples of 64");
  static_assert(kRowsPerWarpgroup == 64, "one wgmma M (64 rows) per consumer warpgroup");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "kBlockN is the wgmma N of Q Kᵀ");
  static_assert(kHeadDimV <= 256, "kHeadDimV is the wgmma N of P V");
  static_assert(kStages == 2, "PrefillBarriers holds two stages");

  static constexpr int kQBoxBytes = kBlockM * 128;   // one [kBlockM][64] box
  static constexpr int kKVBoxBytes = kBlockN * 128;  // one [kBlockN][64] box
  static constexpr int kQBytes = kQBoxes * kQBoxBytes;
  static constexpr int kKBytes = kQBoxes * kKVBoxBytes;
  static constexpr int kVBytes = kVBoxes * kKVBoxBytes;

  static constexpr int kSmemQ = 0;
  static constexpr int kSmemK = kSmemQ + kQBytes;
  static constexpr int kSmemV = kSmemK + kStages * kKBytes;
  static constexpr int kSmemBarriers = kSmemV + kStages * kVBytes;
  static constexpr int kSmemOrder = kSmemBarriers + (int(sizeof(PrefillBarriers)) + 15) / 16 * 16;
  // + 1024: dynamic shared memory is only 16-byte aligned; the kernel rounds
  // its base up to the 1024-byte swizzle period.
  static constexpr int kSmemBytes = kSmemOrder + int(sizeof(PrefillRequestOrder)) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "the tiles exceed the 227 KB a block can have");
};

}  // namespace lattn::cuda::sm90
