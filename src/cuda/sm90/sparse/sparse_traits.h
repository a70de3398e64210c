// src/cuda/sm90/sparse/sparse_traits.h — the compile-time shape of the Hopper
// (wgmma) sparse MLA decode kernel: the dense Hopper decode kernel's tiles
// (sm90/decode/decode_traits.h: Q resident as 9 swizzled boxes, a 2-stage
// ring of 64-key bf16 tiles, P one box) plus, per stage, the tile's list of
// gathered rows. fp8_ds_mla rows are dequantized into the same bf16 tiles,
// so both cache formats share the layout.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "cuda/sm90/decode/decode_traits.h"

namespace lattn::cuda::sm90 {

// kFp8Batch: fp8_ds_mla rows each producer warp loads before it converts
// them (more loads in flight, more registers).
template <bool kDsMla_, int kFp8Batch_ = 8>
struct SparseTraits : DecodeTraits<__nv_bfloat16> {
  using Base = DecodeTraits<__nv_bfloat16>;
  static constexpr bool kDsMla = kDsMla_;
  static constexpr int kFp8Batch = kFp8Batch_;
  static_assert(kFp8Batch == 4 || kFp8Batch == 8, "register budgets below are set for batches of 4 and 8");
  // fp8_ds_mla rows: 512 fp8 latents, 4 f32 tile scales, 64 bf16 rope values.
  static constexpr int kDsRowBytes = 656, kDsScalesAt = 512, kDsRopeAt = 528;

  // The producer warpgroup gathers rows (bf16: cp.async, a few registers;
  // fp8_ds_mla: loads, dequantization and stores in registers, so it gets more
  // and the consumers keep what O (128 f32) and S need: ptxas spills nothing
  // at 32 / 232 for bf16, 72 / 216 with batches of 4 and 88 / 208 with
  // batches of 8; the index copy one tile ahead and the line prefetches made
  // the earlier 24, 64 and 80 spill a few bytes). The sum must not exceed the
  // 168 x 384 registers allocated at launch.
  static constexpr int kProducerRegs = !kDsMla ? 32 : kFp8Batch == 4 ? 72 : 88;
  static constexpr int kConsumerRegs = !kDsMla ? 232 : kFp8Batch == 4 ? 216 : 208;
  static_assert(kProducerRegs * kProducerThreads + kConsumerRegs * kConsumerThreads <= 168 * kThreads,
                "setmaxnreg may only redistribute the registers allocated at launch (168 per thread)");

  // Per stage: the tile's valid rows as cache offsets in 16-byte units, and
  // their count (the rest of the tile is zero-filled).
  static constexpr size_t kSlotsOffset = Base::kUsedBytes;
  static constexpr size_t kCountsOffset = kSlotsOffset + size_t(kStages) * kBlockN * 4;
  // The next tile's raw indices, copied in one tile ahead (sparse_kernel.cuh).
  static constexpr size_t kNextIdxOffset = (kCountsOffset + size_t(kStages) * 4 + 15) / 16 * 16;
  static constexpr size_t kUsedBytes = kNextIdxOffset + size_t(kBlockN) * 4;
  static constexpr size_t kSmemBytes = kUsedBytes + 1024;  // + the 1024-byte alignment of the base
  static_assert(kSmemBytes <= 232448, "must fit the 227 KB a Hopper block may opt in to");
};

}  // namespace lattn::cuda::sm90
