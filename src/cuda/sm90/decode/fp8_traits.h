// src/cuda/sm90/decode/fp8_traits.h — the compile-time shape of the Hopper
// decode kernel for an fp8 e4m3 latent cache ("key-major": the keys are the
// M dimension of every wgmma, docs/hopper.md "fp8 cache").
//
// Why key-major: with at most 16 packed rows per request (H16, one query
// token) a 64-row M tile would be 3/4 padding, and at the key rate an fp8
// cache allows (half the bytes of a 16-bit one) those padded products alone
// would need ~0.8 of the GPU's bf16 rate. With the keys as M and the 16 rows
// as N nothing is padded:
//   S^T [64 keys][16 rows] = K [64 keys][576] . Q^T   (36 wgmma m64n16k16)
//   O^T [512][16 rows]    += V^T [512][64 keys] . P^T  (8 x 4 wgmma m64n16k16)
// Both A operands (K and V^T) come from registers, dequantized there from
// the fp8 tile the TMA copy wrote (cvt e4m3x2 -> f16x2, exact), so the fp8
// tile is read once per product and never rewritten as 16-bit. The MMAs run
// in f16 for both activation dtypes: bf16 Q is converted to f16 with a
// power-of-two scale per row (exact in range, more mantissa than bf16).
//
// A CTA owns 16 packed rows (heads x query tokens of one request, row
// j * H + h) of the plan's (request, tile range) pieces. Two consumer
// warpgroups take alternate 64-key tiles, each with its own online-softmax
// state (no exchange between them per tile), merged once per piece; the
// producer warpgroup's first thread keeps a ring of kStages fp8 tiles full.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/sm90/common/warp_roles.h"

namespace lattn::cuda::sm90 {

// Warps: common/warp_roles.h (setmaxnreg 24 / 240).
template <class T_>
struct DecodeFp8Traits : WarpRoles<> {
  using T = T_;  // activations (and output): __nv_bfloat16 or __half; the MMAs run in f16
  static constexpr int kL = 512, kR = 64, kD = kL + kR;
  static constexpr int kRows = 16;                 // packed rows per CTA (the MMAs' N)
  static constexpr int kBlockN = 64;               // keys per tile (the MMAs' M)
  static constexpr int kChunkCols = 64;            // fp8 columns per TMA box (64 bytes)
  static constexpr int kChunks = kD / kChunkCols;  // 9 boxes per tile
  static constexpr int kStages = 4;                // fp8 tiles in the TMA ring
  static constexpr int kOBlocks = kL / 64;  // O^T m64 blocks per warpgroup (8)

  // Shared memory, byte offsets from a 1024-byte aligned base.
  static constexpr size_t kChunkBytes = size_t(kBlockN) * kChunkCols;  // [64 keys][64 B]: 4 KB
  static constexpr size_t kTileBytes = kChunks * kChunkBytes;          // 36 KB
  static constexpr size_t kQBoxBytes = size_t(kRows) * 128;            // [16 rows][64] f16, 128-byte swizzle: 2 KB
  static constexpr size_t kKVOffset = 0;
  static constexpr size_t kQOffset = kKVOffset + kStages * kTileBytes;                 // 9 boxes: 18 KB
  static constexpr size_t kPOffset = kQOffset + kChunks * kQBoxBytes;                  // [2 wg] one box each
  static constexpr size_t kMergeOffset = kPOffset + kConsumerWarpgroups * kQBoxBytes;  // O of warpgroup 1: 32 KB f32
  static constexpr size_t kMergeBytes = size_t(128) * kOBlocks * 8 * 4;
  static constexpr size_t kRowMaxOffset = kMergeOffset + kMergeBytes;         // [2 wg][4 warps][16] f32
  static constexpr size_t kRowSumOffset = kRowMaxOffset + 2 * 4 * kRows * 4;  // [2 wg][4 warps][16] f32
  static constexpr size_t kStatOffset = kRowSumOffset + 2 * 4 * kRows * 4;    // [16] m of warpgroup 1
  static constexpr size_t kRowScaleOffset = kStatOffset + kRows * 4;          // [16] score factor per row
  static constexpr size_t kBarrierOffset = kRowScaleOffset + kRows * 4;       // full[kStages], empty[kStages]
  static constexpr size_t kUsedBytes = kBarrierOffset + 2 * kStages * 8;
  static constexpr size_t kSmemBytes = kUsedBytes + 1024;  // the kernel rounds its base up to 1024
  static_assert(kSmemBytes <= 232448, "must fit the 227 KB a Hopper block may opt in to");

  static constexpr uint32_t kTileTxBytes = uint32_t(kTileBytes);
};

}  // namespace lattn::cuda::sm90
