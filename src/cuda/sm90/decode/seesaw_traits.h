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

#include "cuda/sm90/decode/decode_traits.h"

namespace lattn::cuda::sm90 {

// The serial kernel's shape (decode_traits.h: the 576-wide latent row in
// 64-column boxes, Q and two 72 KB stages), with what the seesaw does
// differently: its register split, release groups and shared-memory map.
template <class T_>
struct SeesawTraits : DecodeTraits<T_> {
  using Base = DecodeTraits<T_>;
  using Base::kBlockM, Base::kBlockN, Base::kBoxes, Base::kStages, Base::kKVTileBytes;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static_assert(kProducerRegs * Base::kProducerThreads + kConsumerRegs * Base::kConsumerThreads <= 168 * Base::kThreads,
                "setmaxnreg may only redistribute the registers allocated at launch (168 per thread)");
  static constexpr int kPeBox = kBoxes - 1;  // k_pe: dead after the tile's S, then holds its P

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

  // Shared memory, byte offsets from a 1024-byte aligned base: Q and the
  // stages where the serial kernel has them; P has no box of its own
  // (kPOffset is tile A's k_pe box, for CtaSmem).
  static constexpr size_t kPOffset = Base::kKVOffset + kPeBox * size_t(kBlockN) * 128;
  // [2 pair parities][2][64] f32: the row max after tile A, after tile B (a
  // slot is rewritten two pairs later).
  static constexpr size_t kRowMaxOffset = Base::kKVOffset + kStages * kKVTileBytes;
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
