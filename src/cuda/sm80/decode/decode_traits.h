// src/cuda/sm80/decode/decode_traits.h — every compile-time decision of the absorbed
// MLA decode kernel (FlashInfer's KernelTraits idea), and the shared-memory
// layout that follows from it.
//
// A CTA owns kBlockM rows (heads x query tokens of one request) and walks the
// request's KV in tiles of kBlockN keys; each key is one cache entry of
// kD = L + R = 576 elements (L = 512 latent, R = 64 rope), and V is the first
// L elements of the same entry (no separate V load).
//
// Warps, phase 1 (S = Q K^T, 16 x 8 mma tiles): kRowGroups x kColGroups warps,
// warp (rg, cg) computes rows [16 rg, 16 rg + 16) x keys
// [cg * kKeysPerWarp, ...). Phase 2 (O += P V): every warp owns all kBlockM
// rows and kColsPerWarp of the L output columns, so V is read from shared
// memory once per CTA and the P tile once per warp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lattn::cuda::sm80 {

template <int kBlockM_, int kBlockN_, int kWarps_, int kStages_, class T_, class Cache_>
struct DecodeTraits {
  using T = T_;          // activation (and mma operand) type: __nv_bfloat16 or __half
  using Cache = Cache_;  // cache element type: T, or __nv_fp8_e4m3 (dequantized on load)
  static constexpr bool kFp8 = sizeof(Cache) == 1;

  static constexpr int kL = 512, kR = 64, kD = kL + kR;
  static constexpr int kBlockM = kBlockM_, kBlockN = kBlockN_, kWarps = kWarps_;
  // KV tiles in the cp.async ring: kStages - 1 tiles are in flight while one is computed.
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = kWarps * 32;

  static constexpr int kRowGroups = kBlockM / 16;
  static constexpr int kColGroups = kWarps / kRowGroups;
  static constexpr int kKeysPerWarp = kBlockN / kColGroups;
  static constexpr int kNTilesS = kKeysPerWarp / 8;  // 8-key mma tiles per warp in phase 1
  static constexpr int kColsPerWarp = kL / kWarps;   // output columns per warp in phase 2
  static constexpr int kNTilesO = kColsPerWarp / 8;
  static constexpr int kMTiles = kBlockM / 16;
  static constexpr int kChunksPerRow = kD / 8;      // 16-byte chunks of a 16-bit entry (72)
  static constexpr int kFp8ChunksPerRow = kD / 16;  // 16-byte chunks of an fp8 entry (36)
  static constexpr int kPStride = kBlockN + 8;      // padded P rows: conflict-free ldmatrix

  static_assert(kBlockM % 16 == 0 && kWarps % kRowGroups == 0, "rows split into 16-row groups");
  static_assert(kKeysPerWarp % 8 == 0 && kKeysPerWarp >= 8, "each warp needs whole 8-key tiles");
  static_assert(kNTilesO % 2 == 0, "phase 2 loads V for two 8-column tiles at a time");
  static_assert(kD % 16 == 0 && kBlockN % 16 == 0, "k16 steps");
  static_assert(kStages >= 2, "double buffering at least");

  // Q in registers: with 16 rows and 8 warps each warp needs the whole Q tile
  // as mma A fragments (36 k-steps x 4 registers) and re-reads it from shared
  // memory on every KV tile otherwise. Keeping it in registers halves the
  // shared-memory traffic of phase 1 and frees Q's 18 KB, which buys a third
  // KV stage (two 64-key tiles in flight instead of one). Q then passes
  // through a free KV buffer once per request piece.
  static constexpr bool kQInRegs = kBlockM == 16 && kWarps == 8 && kStages >= 3;

  // Shared memory (bytes), in this order. Q and K are swizzled (16-byte chunk
  // c of row r is stored at chunk c ^ (r & 7)), so ldmatrix reads of 8
  // consecutive rows hit 8 different bank groups without padding.
  static constexpr size_t kQBytes = kQInRegs ? 0 : size_t(kBlockM) * kD * 2;
  // 16-bit caches: the ring holds the tiles themselves. fp8 caches: the ring
  // holds raw fp8 tiles, converted into one 16-bit tile before use.
  static constexpr int kKTiles = kFp8 ? 1 : kStages;
  static constexpr size_t kKBytes = size_t(kKTiles) * kBlockN * kD * 2;
  static constexpr size_t kStagingBytes = kFp8 ? size_t(kStages) * kBlockN * kD : 0;
  static constexpr size_t kPBytes = size_t(kBlockM) * kPStride * 2;
  static constexpr size_t kReduceBytes = size_t(kColGroups) * kBlockM * 4;  // row max, then row sum
  static constexpr size_t kRowVecBytes = size_t(2) * kBlockM * 4;           // alpha, then 1/l and LSE
  static constexpr size_t kSmemBytes = kQBytes + kKBytes + kStagingBytes + kPBytes + kReduceBytes + kRowVecBytes;
};

// Swizzled element offset of (row, col) in a [rows][kD] 16-bit tile; col is a
// multiple of 8 (one 16-byte chunk).
template <int kD>
__device__ __forceinline__ int swizzle(int row, int col) {
  return row * kD + ((((col >> 3) ^ (row & 7))) << 3);
}

}  // namespace lattn::cuda::sm80
