// src/cuda/sm90/decode/km16_traits.h — the compile-time shape of the
// key-major Hopper decode kernel for a 16-bit latent cache (bf16 or f16, the
// activation dtype): the fp8 kernel's layout (fp8_traits.h, docs/hopper.md
// "fp8 cache") with both products reading their operands from shared memory.
//
// Why: with at most 16 packed rows per request (H16, one query token) the
// 64-row wgmma kernel is 3/4 padding. With the keys as the M dimension and the
// 16 rows as N nothing is padded:
//   S^T [64 keys][16 rows] = K [64 keys][576] . Q^T   (36 wgmma m64n16k16)
//   O^T [512][16 rows]    += V^T [512][64 keys] . P^T  (8 x 4 wgmma m64n16k16)
// K is the A operand straight from the TMA stage (K-major, 128-byte
// swizzle, as the TMA box lands), V^T the same stage read MN-major (A
// transposed); Q and P are the B operands. No fragment is loaded into
// registers and nothing is converted: the MMAs run in the cache's dtype.
//
// A CTA owns 16 packed rows (row j * H + h) of the plan's (request, tile
// range) pieces. Two consumer warpgroups take alternate 64-key tiles, each
// with its own online-softmax state, merged once per piece; a 64-key tile
// of 576 16-bit columns is 72 KB, so two stages fit (one per warpgroup),
// beside Q, the P boxes and the merge buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/sm90/common/warp_roles.h"

namespace lattn::cuda::sm90 {

// Warps: common/warp_roles.h (setmaxnreg 24 / 240).
template <class T_>
struct DecodeKm16Traits : WarpRoles<> {
  using T = T_;  // activations, cache and MMA operands: __nv_bfloat16 or __half
  static constexpr int kL = 512, kR = 64, kD = kL + kR;
  static constexpr int kRows = 16;                  // packed rows per CTA (the MMAs' N)
  static constexpr int kBlockN = 64;                // keys per tile (the MMAs' M)
  static constexpr int kChunkCols = 64;             // 16-bit columns per TMA box (128 bytes)
  static constexpr int kChunks = kD / kChunkCols;   // 9 boxes per tile
  static constexpr int kVChunks = kL / kChunkCols;  // the first 8 are V
  static constexpr int kStages = 2;                 // 16-bit tiles in the TMA ring
  static constexpr int kOBlocks = kL / 64;          // O^T m64 blocks per warpgroup (8)

  // Shared memory, byte offsets from a 1024-byte aligned base.
  static constexpr size_t kChunkBytes = size_t(kBlockN) * 128;  // [64 keys][64] 16-bit, swizzled: 8 KB
  static constexpr size_t kTileBytes = kChunks * kChunkBytes;   // 72 KB
  static constexpr size_t kQBoxBytes = size_t(kRows) * 128;     // [16 rows][64], 128-byte swizzle: 2 KB
  static constexpr size_t kKVOffset = 0;
  static constexpr size_t kQOffset = kKVOffset + kStages * kTileBytes;                 // 9 boxes: 18 KB
  static constexpr size_t kPOffset = kQOffset + kChunks * kQBoxBytes;                  // [2 wg] one box each
  static constexpr size_t kMergeOffset = kPOffset + kConsumerWarpgroups * kQBoxBytes;  // see below
  // Warpgroup 1's O^T (128 threads x 64 f32: 32 KB) at the end of a piece,
  // then the merged O as [16 rows][kOutStride] f32 for coalesced stores
  // (stride 516: the 4 rows a store instruction touches fall in other banks).
  static constexpr int kOutStride = kL + 4;
  static constexpr size_t kMergeBytes = size_t(kRows) * kOutStride * 4;
  static_assert(kMergeBytes >= size_t(128) * kOBlocks * 8 * 4, "the merge buffer holds warpgroup 1's O^T");
  static constexpr size_t kRowMaxOffset = kMergeOffset + kMergeBytes;         // [2 wg][4 warps][16] f32
  static constexpr size_t kRowSumOffset = kRowMaxOffset + 2 * 4 * kRows * 4;  // [2 wg][4 warps][16] f32
  static constexpr size_t kStatOffset = kRowSumOffset + 2 * 4 * kRows * 4;    // [16] m of warpgroup 1, [16] LSE
  static constexpr size_t kBadKeyOffset = kStatOffset + 2 * kRows * 4;        // [2 wg][2 parities] int
  static constexpr size_t kBarrierOffset = kBadKeyOffset + 4 * 4;             // full[kStages], empty[kStages]
  static constexpr size_t kUsedBytes = kBarrierOffset + 2 * kStages * 8;
  static constexpr size_t kSmemBytes = kUsedBytes + 1024;  // the kernel rounds its base up to 1024
  static_assert(kSmemBytes <= 232448, "must fit the 227 KB a Hopper block may opt in to");
  static_assert(kQOffset % 1024 == 0 && kPOffset % 1024 == 0, "swizzled boxes start on 1024 bytes");

  static constexpr uint32_t kTileTxBytes = uint32_t(kTileBytes);
};

}  // namespace lattn::cuda::sm90
