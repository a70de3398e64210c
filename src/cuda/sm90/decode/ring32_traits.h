// src/cuda/sm90/decode/ring32_traits.h — the "ring32" schedule of the Hopper
// decode kernel (docs/hopper.md, "The ring32 schedule"): the serial kernel's
// CTA (64 packed rows, two consumer warpgroups, one producer warpgroup) with
// a ring of four 32-key stages (36 KB each) instead of two 64-key ones, so
// that while the consumers compute one stage, three (108 KB) can be in
// flight instead of one (72 KB).
//
// Per 32-key tile:
//  * S: warpgroup g computes the partial S[64 rows][32 keys] over its 288
//    reduction columns [288g, +288) (18 wgmma m64n32k16; K-major K from the
//    stage). Warpgroup 0 reads Q columns [0, 288) from shared memory;
//    warpgroup 1 reads [288, 512) from shared memory and keeps the 64 q_pe
//    columns (4 k16 steps) in registers as the RS A operand — that frees the
//    8 KB that four stages and the exchange need beside Q.
//  * The two partials are exchanged through shared memory (16 KB, f32) and
//    added (p0 + p1 in both warpgroups: the same bits), so both warpgroups
//    hold the whole S, compute the same softmax and keep P in registers.
//  * O += P V: warpgroup g owns O's columns [256g, +256) (128 f32 registers
//    per thread), 2 wgmma m64n256k16 in the RS form (P from registers, V
//    MN-major from the stage's boxes 4g .. 4g + 3).
// No row-max or P exchange: two named barriers per tile (partials written;
// partials read, so the next tile may overwrite them).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/sm90/common/warp_roles.h"

namespace lattn::cuda::sm90 {

template <class T_>
struct DecodeRing32Traits : WarpRoles<> {
  using T = T_;  // activations, cache and MMA operands: __nv_bfloat16 or __half
  static constexpr int kL = 512, kR = 64, kD = kL + kR;
  static constexpr int kBlockM = 64;
  static constexpr int kBlockN = 64;     // the plan's tile (smxx/decode_pieces.cuh): two compute tiles
  static constexpr int kTileKeys = 32;   // keys per stage and per compute tile
  static constexpr int kBoxCols = 64;    // 128 bytes of 16-bit elements
  static constexpr int kBoxes = kD / kBoxCols;   // 9 boxes per 576-wide key
  static constexpr int kQSmemBoxes = kL / kBoxCols;  // Q's first 8 boxes in shared memory; q_pe in registers
  static constexpr int kStages = 4;
  static constexpr int kColsPerWarpgroup = kL / kConsumerWarpgroups;  // PV N = 256
  static constexpr int kSteps = kD / 16;                              // 36 k16 steps of S
  static constexpr int kStepsPerWarpgroup = kSteps / kConsumerWarpgroups;  // 18
  static constexpr int kQpeSteps = kR / 16;                            // warpgroup 1's register steps (4)

  // Shared memory, byte offsets from a 1024-byte aligned base.
  static constexpr size_t kBoxBytes = size_t(kBlockM) * 128;                   // one Q box [64][64]: 8 KB
  static constexpr size_t kStageBoxBytes = size_t(kTileKeys) * 128;            // one K box [32][64]: 4 KB
  static constexpr size_t kKVTileBytes = kBoxes * kStageBoxBytes;              // 36 KB
  static constexpr size_t kQOffset = 0;
  static constexpr size_t kQBytes = kQSmemBoxes * kBoxBytes;                   // 64 KB
  static constexpr size_t kKVOffset = kQOffset + kQBytes;
  // The partial-S exchange: [2 writer warpgroups][4 float4][128 threads].
  static constexpr size_t kXchgOffset = kKVOffset + kStages * kKVTileBytes;
  static constexpr size_t kXchgBytes = size_t(kConsumerWarpgroups) * 4 * 128 * 16;  // 16 KB
  static constexpr size_t kRowSumOffset = kXchgOffset + kXchgBytes;           // [2][64] f32: write_o's row sums
  static constexpr size_t kBarrierOffset = kRowSumOffset + 2 * kBlockM * 4;   // full[kStages], empty[kStages]
  static constexpr size_t kBadKeyOffset = kBarrierOffset + 2 * kStages * 8;   // int[2]: sanitize flag by parity
  static constexpr size_t kUsedBytes = kBadKeyOffset + 2 * 4;
  // CtaSmem's P and row-max pointers are unused here (no P box, no row-max
  // exchange): they alias the exchange buffer.
  static constexpr size_t kPOffset = kXchgOffset, kRowMaxOffset = kXchgOffset;
  // + 1024: the dynamic window is only guaranteed 16-byte aligned.
  static constexpr size_t kSmemBytes = kUsedBytes + 1024;
  static_assert(kSmemBytes <= 232448, "must fit the 227 KB a Hopper block may opt in to");

  static constexpr uint32_t kKVTileTxBytes = uint32_t(kKVTileBytes);
};

// Diagnostic copy probes (benchmarks only; wrong results): the producer's
// ring of kStages_ stages of kTileKeys_ keys with no math (the consumers wait
// for each stage and release it at once); kHalf_: each M-tile CTA copies only
// the boxes c with c % 2 == blockIdx.x % 2 (the same unique bytes from DRAM,
// half the L2 -> SM bytes at two M tiles). No Q in shared memory.
template <int kTileKeys_, int kStages_, bool kHalf_>
struct DecodeCopyProbeTraits : WarpRoles<> {
  static constexpr int kD = 576, kBoxCols = 64, kBoxes = kD / kBoxCols;
  static constexpr int kBlockM = 64, kBlockN = 64;
  static constexpr int kTileKeys = kTileKeys_, kStages = kStages_;
  static constexpr bool kHalf = kHalf_;
  static constexpr size_t kStageBoxBytes = size_t(kTileKeys) * 128;
  static constexpr size_t kKVTileBytes = kBoxes * kStageBoxBytes;
  static constexpr size_t kQOffset = 0, kKVOffset = 0;
  static constexpr size_t kBarrierOffset = kStages * kKVTileBytes;
  static constexpr size_t kPOffset = kBarrierOffset, kRowMaxOffset = kBarrierOffset, kRowSumOffset = kBarrierOffset;
  static constexpr size_t kSmemBytes = kBarrierOffset + 2 * kStages * 8 + 1024;
  static_assert(kSmemBytes <= 232448, "must fit the 227 KB a Hopper block may opt in to");
};

}  // namespace lattn::cuda::sm90
