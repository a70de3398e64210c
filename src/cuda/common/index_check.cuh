// src/cuda/common/index_check.cuh — the device side of index_check.h: checked
// reads of block tables and slot mappings.
#pragma once

#include <cstdint>

#include "cuda/common/index_check.h"

namespace lattn::cuda {

// Records a violation (words may be nullptr: not recorded).
__device__ __forceinline__ void record_index_violation(uint32_t* words, IndexViolationKind kind) {
  if (words != nullptr) *reinterpret_cast<volatile uint32_t*>(words + kind) = 1u;
}

// The block id in column `col` of a block-table row, or -1 (recorded) when the
// column is past the table's width or the id is outside [0, num_blocks).
// A limit <= 0 is not checked (params filled by code that does not know it).
__device__ __forceinline__ int64_t checked_block_id(const int32_t* row, int64_t col, int64_t table_width,
                                                    int64_t num_blocks, uint32_t* words) {
  if (col < 0 || (table_width > 0 && col >= table_width)) {
    record_index_violation(words, kBadTableColumn);
    return -1;
  }
  const int32_t block = row[col];
  if (block < 0 || (num_blocks > 0 && block >= num_blocks)) {
    record_index_violation(words, kBadBlockId);
    return -1;
  }
  return block;
}

}  // namespace lattn::cuda
