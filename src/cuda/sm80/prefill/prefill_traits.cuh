// src/cuda/sm80/prefill/prefill_traits.cuh — every compile-time decision of one
// prefill kernel instance: tile shape, per-warp fragment counts and the
// shared-memory layout.
//
// Shared memory holds three tiles, each row-major with its rows padded by
// one 16-byte chunk:  Q [block_m][qk] | K [block_n][qk] | V [block_n][v].
// A row of C chunks (C even) then has a pitch of C + 1 (odd) chunks, so the
// eight row addresses of one ldmatrix 8x8 matrix fall into eight different
// 4-bank groups: conflict-free for any head dim that is a multiple of 16,
// with no swizzle to get wrong. After the main loop the Q tile is reused to
// stage the output tile (pitch of V) for 16-byte coalesced stores.
#pragma once

#include "cuda/sm80/prefill/prefill_config.h"

namespace lattn::cuda::sm80 {

// Instance kConfig of the table kPrefillTileConfigs (the launcher
// instantiates by index, so the table stays the single source of truth).
template <int kConfig, class Element_>
struct PrefillKernelTraits {
  using Element = Element_;  // __nv_bfloat16 or __half
  static constexpr PrefillTileConfig kCfg = kPrefillTileConfigs[kConfig];
  static constexpr int kHeadDimQK = kCfg.head_dim_qk;
  static constexpr int kHeadDimV = kCfg.head_dim_v;
  static constexpr int kBlockM = kCfg.block_m;
  static constexpr int kBlockN = kCfg.block_n;
  static constexpr int kNumWarps = kCfg.num_warps;
  static constexpr int kMinBlocksPerSm = kCfg.min_blocks_per_sm;
  // Unroll factor of the k16 loop of Q Kᵀ.
  static constexpr int kQKUnroll = kCfg.qk_unroll == 0 ? kHeadDimQK / 16 : kCfg.qk_unroll;
  static constexpr int kThreads = kNumWarps * 32;

  // Each warp owns kWarpRows consecutive query rows = kMTiles m16 tiles.
  static constexpr int kWarpRows = kBlockM / kNumWarps;
  static constexpr int kMTiles = kWarpRows / 16;
  static constexpr int kNTilesS = kBlockN / 8;       // n8 tiles of S = Q Kᵀ per m16 tile
  static constexpr int kNTilesO = kHeadDimV / 8;     // n8 tiles of O per m16 tile
  static constexpr int kKStepsQK = kHeadDimQK / 16;  // k16 steps of Q Kᵀ
  static constexpr int kKStepsPV = kBlockN / 16;     // k16 steps of P V

  // 16-byte chunks per row and padded pitches (bytes).
  static constexpr int kChunksQK = kHeadDimQK / 8;
  static constexpr int kChunksV = kHeadDimV / 8;
  static constexpr int kPitchQK = (kChunksQK + 1) * 16;
  static constexpr int kPitchV = (kChunksV + 1) * 16;

  static constexpr int kSmemQ = 0;
  static constexpr int kSmemK = kSmemQ + kBlockM * kPitchQK;
  static constexpr int kSmemV = kSmemK + kBlockN * kPitchQK;
  static constexpr int kSmemBytes = kSmemV + kBlockN * kPitchV;

  static_assert(kBlockM % kNumWarps == 0 && kWarpRows % 16 == 0, "each warp owns whole m16 tiles");
  static_assert(kMTiles == 1 || kMTiles == 2, "16 or 32 query rows per warp");
  static_assert(kHeadDimQK % 16 == 0 && kHeadDimV % 16 == 0, "head dims must be multiples of 16 (k16 steps)");
  static_assert(kBlockN % 16 == 0 && kNTilesS % 2 == 0 && kNTilesO % 2 == 0, "ldmatrix.x4 loads n8 tiles in pairs");
  static_assert(kHeadDimV <= kHeadDimQK, "the output tile is staged in the Q tile's shared memory");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA exceeds the sm90 limit");
};

}  // namespace lattn::cuda::sm80
