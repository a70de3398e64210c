// Local-attention virtual batches (see lattn/local_attention.h). Written per
// request instead of with numpy's repeat/cumsum, with the same results.
#include "lattn/local_attention.h"

#include <algorithm>
#include <string>

#include "lattn/errors.h"

namespace lattn {
namespace {

// Python's a // b and a % b: floor division and a remainder with the sign
// of b (C++'s / and % truncate toward zero instead).
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

}  // namespace

LocalAttentionVirtualBatches make_local_attention_virtual_batches(int attn_chunk_size,
                                                                  std::span<const int32_t> query_start_loc,
                                                                  std::span<const int32_t> seq_lens,
                                                                  const Tensor& block_table, int block_size) {
  const std::string op = "make_local_attention_virtual_batches: ";
  const int64_t chunk = attn_chunk_size;
  if (chunk <= 0) throw ValueError(op + "attn_chunk_size must be > 0, got " + std::to_string(attn_chunk_size));
  if (block_size <= 0) {
    throw ValueError(op + "block_size must be > 0 (the cache's block size; the seed's default 0 is invalid), got " +
                     std::to_string(block_size));
  }
  const int num_reqs = int(seq_lens.size());
  if (query_start_loc.size() != seq_lens.size() + 1) {
    throw ValueError(op + "query_start_loc must have len(seq_lens) + 1 = " + std::to_string(num_reqs + 1) +
                     " entries, got " + std::to_string(query_start_loc.size()));
  }
  if (!block_table.defined() || block_table.dtype() != DType::i32 || block_table.dim() != 2 ||
      block_table.size(0) < num_reqs || block_table.size(1) < 1) {
    throw ValueError(op + "argument 'block_table' must be an int32 tensor of shape [>= " + std::to_string(num_reqs) +
                     ", >= 1], got " + (block_table.defined() ? block_table.describe() : std::string("no tensor")));
  }
  for (int r = 0; r < num_reqs; ++r) {
    const int64_t q = int64_t(query_start_loc[size_t(r) + 1]) - query_start_loc[size_t(r)];
    if (q <= 0) {
      throw ValueError(op + "request " + std::to_string(r) + " has query length " + std::to_string(q) +
                       "; every query length must be > 0");
    }
    if (seq_lens[size_t(r)] < q) {
      throw ValueError(op + "request " + std::to_string(r) + " has seq_len " + std::to_string(seq_lens[size_t(r)]) +
                       " below its query length " + std::to_string(q));
    }
  }
  if (chunk % block_size != 0) {
    throw AssertionError("attn_chunk_size " + std::to_string(attn_chunk_size) + " is not divisible by block_size " +
                         std::to_string(block_size));
  }
  const int64_t pages_per_local_batch = chunk / block_size;

  LocalAttentionVirtualBatches out;
  std::vector<int32_t> batch_of, block_start_of;  // per virtual request
  out.cu_seqlens_q_local.push_back(0);
  for (int r = 0; r < num_reqs; ++r) {
    const int64_t q = int64_t(query_start_loc[size_t(r) + 1]) - query_start_loc[size_t(r)];
    const int64_t seq_len = seq_lens[size_t(r)];
    // Query tokens in the (possibly partial) first chunk they touch.
    const int64_t q_first = std::min(chunk - floor_mod(seq_len - q, chunk), q);
    // Keys in the last chunk: seq_len % -chunk in Python is in (-chunk, 0].
    // Keys in the last chunk: seq_lens % -attn_chunk_size lies in
    // (-chunk, 0], so this is in [1, chunk] ((seq_len - 1) % chunk + 1).
    const int64_t tokens_in_last_block = chunk + floor_mod(seq_len, -chunk);
    const int64_t local_blocks = 1 + (q - q_first + chunk - 1) / chunk;
    for (int64_t i = 0; i < local_blocks; ++i) {
      const int64_t q_local = i == 0 ? q_first : std::min(q - q_first - chunk * (i - 1), chunk);
      out.seqlens_q_local.push_back(int32_t(q_local));
      out.cu_seqlens_q_local.push_back(out.cu_seqlens_q_local.back() + int32_t(q_local));
      const int64_t reverse = local_blocks - i - 1;
      out.seqlens_k_local.push_back(int32_t(reverse == 0 ? tokens_in_last_block : chunk));
      const int64_t k_start = seq_len - (reverse * chunk + tokens_in_last_block);
      batch_of.push_back(r);
      block_start_of.push_back(int32_t(floor_div(k_start, block_size)));
    }
  }

  // Gather the pages of each virtual request's chunk from the (host) table.
  const int vb = out.virtual_batches();
  Tensor table = block_table;
  OwnedTensor host_table;
  if (!block_table.device().is_cpu()) {
    const Tensor rows = block_table.narrow(0, 0, num_reqs);
    host_table = OwnedTensor::empty(rows.shape(), DType::i32);
    copy_tensor(rows, host_table);
    table = host_table;
  }
  const int64_t last_column = table.size(1) - 1;
  OwnedTensor local = OwnedTensor::empty({vb, pages_per_local_batch}, DType::i32);
  int32_t* dst = local.data_as<int32_t>();
  for (int v = 0; v < vb; ++v) {
    for (int64_t k = 0; k < pages_per_local_batch; ++k) {
      const int64_t column = std::min<int64_t>(block_start_of[size_t(v)] + k, last_column);  // clip(max=...)
      dst[int64_t(v) * pages_per_local_batch + k] =
          *static_cast<const int32_t*>(table.ptr_at({batch_of[size_t(v)], column}));
    }
  }
  if (block_table.device().is_cpu()) {
    out.block_table_local = std::move(local);
  } else {
    out.block_table_local = OwnedTensor::empty({vb, pages_per_local_batch}, DType::i32, block_table.device());
    copy_tensor(local, out.block_table_local);
  }
  return out;
}

}  // namespace lattn
