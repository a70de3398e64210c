// lattn/local_attention.h — chunked local attention as "virtual batches"
// (seed 004's make_local_attention_virtual_batches, docs/metadata.md).
//
// With local attention of chunk size C, a query token attends only to the
// keys of its own C-token chunk. Each request is split into one virtual
// request per chunk its query tokens touch; every virtual request then runs
// as ordinary (causal) attention over its chunk's keys.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lattn/tensor.h"

namespace lattn {

struct LocalAttentionVirtualBatches {
  std::vector<int32_t> seqlens_q_local;     // [virtual_batches] query tokens per virtual request
  std::vector<int32_t> cu_seqlens_q_local;  // [virtual_batches + 1] cumulative, starts at 0
  std::vector<int32_t> seqlens_k_local;     // [virtual_batches] keys per virtual request (<= attn_chunk_size)
  // [virtual_batches, attn_chunk_size / block_size] int32 on block_table's device:
  // the pages of each virtual request's chunk.
  OwnedTensor block_table_local;
  int virtual_batches() const { return int(seqlens_q_local.size()); }
};

// Python (numpy) semantics, including floor division and floor modulo
// (tokens_in_last_block = (seq_len - 1) % C + 1). Block indices past the
// table are clipped to its last column (seed behaviour).
//   query_start_loc [num_reqs + 1] (host) with every query length > 0
//   seq_lens        [num_reqs] (host) context + query tokens, >= query length
//   block_table     [num_reqs, max_blocks] int32, host or device
// Throws ValueError for attn_chunk_size <= 0, block_size <= 0 (the seed's
// default 0 is invalid), mismatched lengths, a query length <= 0 or a
// seq_len below its query length; AssertionError
// "attn_chunk_size {C} is not divisible by block_size {B}" (seed text).
LocalAttentionVirtualBatches make_local_attention_virtual_batches(int attn_chunk_size,
                                                                  std::span<const int32_t> query_start_loc,
                                                                  std::span<const int32_t> seq_lens,
                                                                  const Tensor& block_table, int block_size);

}  // namespace lattn
