// src/cuda/sm90/decode/seesaw_traits.h — the compile-time shape and the
// shared-memory map of the "seesaw" Hopper decode kernel (seesaw_kernel.cuh;
// the schedule is described there and in docs/hopper.md).
//
// A CTA owns kBlockM = 64 packed rows (heads x query tokens of one request)
// and walks the request's KV two 64-key tiles at a time: tile A (stage 0) for
// consumer warpgroup 0, tile B (stage 1) for consumer warpgroup 1. Each
// warpgroup computes S for its whole tile (wgmma m64n64k16 over 36 k16 steps)
// and its own softmax; the output O = [O_L | O_R] (64 x 512 f32) is split by
// columns, O_L in warpgroup 0 and O_R in warpgroup 1 (128 registers per
// thread), and each warpgroup multiplies both tiles' P by its half of V.
// The producer warpgroup (one thread issues the copies) gives its registers
// to the consumers (setmaxnreg 24 / 240, as in decode_traits.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lattn::cuda::sm90 {

template <class T_>
struct SeesawTraits {
  using T = T_;  // activations, cache and MMA operands: __nv_bfloat16 or __half
  static constexpr int kL = 512, kR = 64, kD = kL + kR;
  static constexpr int kBlockM = 64, kBlockN = 64;
  static constexpr int kBoxCols = 64;            // 128 bytes of 16-bit elements
  static constexpr int kBoxes = kD / kBoxCols;   // 9 boxes per 576-wide row
  static constexpr int kVBoxes = kL / kBoxCols;  // the first 8 are V
  static constexpr int kPeBox = kBoxes - 1;      // k_pe: dead after S, then holds the tile's P
  static constexpr int kStages = 2;              // stage 0 = tile A, stage 1 = tile B
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kProducerThreads = 128;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static_assert(kProducerRegs * kProducerThreads + kConsumerRegs * kConsumerThreads <= 168 * kThreads,
                "setmaxnreg may only redistribute the registers allocated at launch (168 per thread)");
  static constexpr int kColsPerWarpgroup = kL / kConsumerWarpgroups;  // P V: N = 256 (O_L, O_R)

  // Release groups: each stage is freed in two halves, each by the one
  // warpgroup that reads it last, so the producer refills half a tile as soon
  // as it is dead. Group 0 = V's left boxes 0..3 (read last by warpgroup 0's
  // P V), group 1 = V's right boxes 4..7 (warpgroup 1's P V). The k_pe box 8
  // holds the tile's P after its S: tile A's P_A' is read by warpgroup 1
  // (group 1 of stage 0), tile B's P_B by warpgroup 0 (group 0 of stage 1).
  static constexpr int kGroups = 2;
  __host__ __device__ static constexpr int box_group(int stage, int box) {
    return box < 4 ? 0 : box < kPeBox ? 1 : (stage == 0 ? 1 : 0);
  }

  // Shared memory, byte offsets from a 1024-byte aligned base.
  static constexpr size_t kBoxBytes = size_t(kBlockM) * 128;              // one [64][64] box: 8 KB
  static constexpr size_t kQBytes = kBoxes * kBoxBytes;                   // 72 KB
  static constexpr size_t kKVTileBytes = kBoxes * size_t(kBlockN) * 128;  // 72 KB
  static constexpr size_t kQOffset = 0;
  static constexpr size_t kKVOffset = kQOffset + kQBytes;
  // [2 pair parities][2][64] f32: m after A, after B (a slot is rewritten two
  // pairs later, after a barrier both warpgroups pass).
  static constexpr size_t kRowMaxOffset = kKVOffset + kStages * kKVTileBytes;
  static constexpr size_t kRowSumOffset = kRowMaxOffset + 2 * 2 * kBlockM * 4;  // [2][64] f32
  // full[kStages][kBoxes] (one per 64-column box: S starts on the first box
  // that lands), then empty[kStages][kGroups].
  static constexpr size_t kBarrierOffset = kRowSumOffset + 2 * kBlockM * 4;
  static constexpr size_t kBadKeyOffset = kBarrierOffset + (kStages * kBoxes + kStages * kGroups) * 8;  // int[2]
  static constexpr size_t kUsedBytes = kBadKeyOffset + 2 * 4;
  // + 1024: the dynamic window is only guaranteed 16-byte aligned; the kernel
  // rounds its base up to 1024 (the 128-byte swizzle's repeat).
  static constexpr size_t kSmemBytes = kUsedBytes + 1024;
  static_assert(kSmemBytes <= 232448, "must fit the 227 KB a Hopper block may opt in to");

  static constexpr uint32_t kBoxTxBytes = uint32_t(kBlockN) * 128;  // bytes each box's barrier waits for
};

}  // namespace lattn::cuda::sm90
