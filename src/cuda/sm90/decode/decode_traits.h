// src/cuda/sm90/decode/decode_traits.h — the compile-time shape of the Hopper
// (wgmma + TMA) absorbed-MLA decode kernel and its shared-memory layout.
//
// A CTA owns kBlockM = 64 packed rows (heads x query tokens of one request,
// row j * H + h) and walks the request's KV in 64-key tiles; a key is one
// latent-cache entry of kD = 576 = 512 (kv_c, also V) + 64 (k_pe) elements.
// Warps: two consumer warpgroups (threads 0..255) and a producer warpgroup
// (threads 256..383) of which one thread issues the bulk tensor copies; the
// producer gives its registers to the consumers (setmaxnreg 24 / 240: ptxas
// budgets registers per warpgroup, so a lone producer warp would cost as much,
// and the launch allocates 168 x 384 registers, which 24 x 128 + 240 x 256
// uses exactly: setmaxnreg.inc waits forever for registers the CTA lacks).
//  * S = Q K^T: consumer warpgroup g computes the 64 rows x keys
//    [32g, 32g + 32) (wgmma m64n32k16 over 36 k16 steps, Q and K from shared
//    memory).
//  * Online softmax in f32 (exp2), the row maxima exchanged between the two
//    warpgroups through shared memory; P (16-bit) goes to a shared tile.
//  * O += P V: warpgroup g owns output columns [256g, 256g + 256) (64 x 256
//    f32 = 128 registers per thread), wgmma m64n256k16 over the 64 keys with
//    P as A and V (the first 512 columns of the same K tile) as an MN-major B.
//
// Every tile in shared memory is stored as 64-column boxes of [rows][64]
// 16-bit elements with the 128-byte swizzle (what TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B and wgmma reads through its descriptors).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lattn::cuda::sm90 {

template <class T_>
struct DecodeTraits {
  using T = T_;  // activations, cache and MMA operands: __nv_bfloat16 or __half
  static constexpr int kL = 512, kR = 64, kD = kL + kR;
  static constexpr int kBlockM = 64, kBlockN = 64;
  static constexpr int kBoxCols = 64;            // 128 bytes of 16-bit elements
  static constexpr int kBoxes = kD / kBoxCols;   // 9 boxes per 576-wide row
  static constexpr int kVBoxes = kL / kBoxCols;  // the first 8 are V
  static constexpr int kStages = 2;              // KV tiles in the TMA ring
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kProducerThreads = 128;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static_assert(kProducerRegs * kProducerThreads + kConsumerRegs * kConsumerThreads <= 168 * kThreads,
                "setmaxnreg may only redistribute the registers allocated at launch (168 per thread)");
  static constexpr int kKeysPerWarpgroup = kBlockN / kConsumerWarpgroups;  // QK N = 32
  static constexpr int kColsPerWarpgroup = kL / kConsumerWarpgroups;       // PV N = 256

  // Shared memory, byte offsets from a 1024-byte aligned base.
  static constexpr size_t kBoxBytes = size_t(kBlockM) * 128;              // one [64][64] box: 8 KB
  static constexpr size_t kQBytes = kBoxes * kBoxBytes;                   // 72 KB
  static constexpr size_t kKVTileBytes = kBoxes * size_t(kBlockN) * 128;  // 72 KB
  static constexpr size_t kQOffset = 0;
  static constexpr size_t kKVOffset = kQOffset + kQBytes;
  static constexpr size_t kPOffset = kKVOffset + kStages * kKVTileBytes;     // P: one [64][64] box
  static constexpr size_t kRowMaxOffset = kPOffset + kBoxBytes;              // [2][64] f32
  static constexpr size_t kRowSumOffset = kRowMaxOffset + 2 * kBlockM * 4;   // [2][64] f32
  static constexpr size_t kBarrierOffset = kRowSumOffset + 2 * kBlockM * 4;  // full[kStages], empty[kStages]
  static constexpr size_t kBadKeyOffset = kBarrierOffset + 2 * kStages * 8;  // int[2]: sanitize_masked_keys' flag
  static constexpr size_t kUsedBytes = kBadKeyOffset + 2 * 4;
  // + 1024: the dynamic window is only guaranteed 16-byte aligned; the kernel
  // rounds its base up to 1024 (the 128-byte swizzle's repeat).
  static constexpr size_t kSmemBytes = kUsedBytes + 1024;
  static_assert(kSmemBytes <= 232448, "must fit the 227 KB a Hopper block may opt in to");

  static constexpr uint32_t kKVTileTxBytes = uint32_t(kKVTileBytes);  // bytes each tile's barrier waits for
};

}  // namespace lattn::cuda::sm90
