// src/core/metadata/graph_buffers.h — the builder's persistent CUDA-graph metadata
// storage (internal): one arena laid out once for the largest captured batch,
// so every graph build writes the same host addresses and, after the first
// to_device, uploads into the same device addresses. A captured graph keeps
// reading those addresses on replay (seed: MLACommonState's graph buffers and
// the runner's graph_block_tables).
#pragma once

#include <memory>

#include "core/metadata/metadata_storage.h"
#include "lattn/metadata.h"

namespace lattn::detail {

struct GraphBuffers {
  std::shared_ptr<MetadataStorage> storage;
  int max_batch_size = 0;
  int max_blocks_per_seq = 0;
  // Byte offsets of the sections in the arena.
  size_t slot_mapping = 0;     // [max_batch_size] int64
  size_t query_start_loc = 0;  // [max_batch_size + 1] int32
  size_t seq_start_loc = 0;    // [max_batch_size + 1] int32
  size_t seq_lens = 0;         // [max_batch_size] int32
  size_t context_lens = 0;     // [max_batch_size] int32
  size_t block_table = 0;      // [max_batch_size, max_blocks_per_seq] int32
  size_t empty = 0;            // a zero-length section for the (absent) prefill arrays

  // Allocates the arena, zero-filled (block tables start as block 0).
  static std::shared_ptr<GraphBuffers> create(const CudaGraphConfig& config);
};

}  // namespace lattn::detail
