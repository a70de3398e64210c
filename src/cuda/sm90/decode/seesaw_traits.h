// src/cuda/sm90/decode/seesaw_traits.h — the compile-time shape and the
// shared-memory map of the "seesaw" Hopper decode kernel (seesaw_kernel.cuh
// has the schedule; docs/hopper.md, "The seesaw").
//
// A CTA owns kBlockM = 64 packed rows (heads x query tokens of one request)
// and walks the request's KV two 64-key tiles at a time: tile A (stage 0)
// for consumer warpgroup 0, tile B (stage 1) for consumer warpgroup 1. Each
// warpgroup computes S for its whole tile (wgmma m64n64k16 over 36 k16
// steps: Q and K are read once per tile, 144 KB of operands per 64 keys
// against the serial kernel's 216 KB) and its own softmax; O = [O_L | O_R]
// (64 x 512 f32) is split by columns, O_L in warpgroup 0 and O_R in
// warpgroup 1 (128 registers per thread), and each warpgroup multiplies both
// tiles' P by its half of V. The warp roles are the serial kernel's
// (common/warp_roles.h) with four producer threads, which need 40 registers
// (with 24 they spilled 40 bytes): setmaxnreg 40 / 232.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/sm90/common/warp_roles.h"

namespace lattn::cuda::sm90 {

template <class T_>
struct SeesawTraits : WarpRoles<40, 232> {
  using T = T_;  // activations, cache and MMA operands: __nv_bfloat16 or __half
  static constexpr int kL = 512, kR = 64, kD = kL + kR;
  static constexpr int kBlockM = 64, kBlockN = 64;
  static constexpr int kBoxCols = 64;                                 // 128 bytes of 16-bit elements
  static constexpr int kBoxes = kD / kBoxCols;                        // 9 boxes per 576-wide row
  static constexpr int kVBoxes = kL / kBoxCols;                       // the first 8 are V
  static constexpr int kPeBox = kBoxes - 1;                           // k_pe: dead after the tile's S, then holds its P
  static constexpr int kStages = 2;                                   // stage 0 = tile A, stage 1 = tile B
  static constexpr int kColsPerWarpgroup = kL / kConsumerWarpgroups;  // P V: N = 256 (O_L, O_R)

  // Release groups: each stage is freed in two halves, each by the one
  // warpgroup that reads it last, so a producer thread refills half a tile
  // as soon as it is dead. Group 0 = V's left boxes 0..3 (read last by
  // warpgroup 0's P V), group 1 = V's right boxes 4..7 (warpgroup 1's P V).
  // The k_pe box holds the tile's P after its S: tile A's P is read by
  // warpgroup 1 (group 1 of stage 0), tile B's by warpgroup 0 (group 0 of
  // stage 1).
  static constexpr int kGroups = 2;
  __host__ __device__ static constexpr int box_group(int stage, int box) {
    return box < 4 ? 0 : box < kPeBox ? 1 : (stage == 0 ? 1 : 0);
  }

  // Shared memory, byte offsets from a 1024-byte aligned base (the names
  // CtaSmem expects; P has no box of its own: kPOffset is tile A's k_pe box).
  static constexpr size_t kBoxBytes = size_t(kBlockM) * 128;              // one [64][64] box: 8 KB
  static constexpr size_t kQBytes = kBoxes * kBoxBytes;                   // 72 KB
  static constexpr size_t kKVTileBytes = kBoxes * size_t(kBlockN) * 128;  // 72 KB
  static constexpr size_t kQOffset = 0;
  static constexpr size_t kKVOffset = kQOffset + kQBytes;
  static constexpr size_t kPOffset = kKVOffset + kPeBox * size_t(kBlockN) * 128;
  // [2 pair parities][2][64] f32: the row max after tile A, after tile B (a
  // slot is rewritten two pairs later).
  static constexpr size_t kRowMaxOffset = kKVOffset + kStages * kKVTileBytes;
  // [2 piece parities][2][64] f32: the epilogue's row sums (a slot is
  // rewritten two pieces later).
  static constexpr size_t kRowSumOffset = kRowMaxOffset + 2 * 2 * kBlockM * 4;
  // full[kStages][kBoxes] (one per 64-column box: S starts on the first box
  // that lands), empty[kStages][kGroups], the two hand-over barriers
  // (warpgroup 0 -> 1 after tile A, 1 -> 0 after tile B) and the epilogue's.
  static constexpr size_t kBarrierOffset = kRowSumOffset + 2 * 2 * kBlockM * 4;
  static constexpr int kBarriers = kStages * kBoxes + kStages * kGroups + 3;
  static constexpr size_t kBadKeyOffset = kBarrierOffset + kBarriers * 8;  // int[2]: one per warpgroup
  static constexpr size_t kUsedBytes = kBadKeyOffset + 2 * 4;
  // + 1024: the dynamic window is only guaranteed 16-byte aligned; the kernel
  // rounds its base up to 1024 (the 128-byte swizzle's repeat).
  static constexpr size_t kSmemBytes = kUsedBytes + 1024;
  static_assert(kSmemBytes <= 232448, "must fit the 227 KB a Hopper block may opt in to");

  static constexpr uint32_t kBoxTxBytes = uint32_t(kBlockN) * 128;  // bytes each box's barrier waits for
};

}  // namespace lattn::cuda::sm90
