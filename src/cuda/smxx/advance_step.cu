// advance_step on CUDA (vLLM's advance_step_flashattn, docs/metadata.md): after
// sampling, each real query q < num_queries takes its sampled token, grows its
// sequence by one and gets the slot of its new last position; padded rows
// [num_queries, num_seqs) are reset (token 0, position 0, slot PAD = -1).
//
// seq_lens and block_tables live on the device, so the host cannot check
// them: the kernel does (cuda/common/index_check.h). A query whose new
// position needs a column past the table's width (or a negative seq_len), or
// whose block id there is negative, is recorded as a violation and gets slot
// PAD and nothing else: the table is never read outside its rows, and no
// later cache write follows that query. A block id past the cache makes a
// slot past the cache, which concat_and_cache_mla refuses the same way (this
// op does not know the cache).
#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/index_check.cuh"
#include "cuda/device_ops.h"
#include "lattn/check.h"

namespace lattn::cuda {
namespace {

// An index vector of int32 or int64 elements.
struct IndexVec {
  void* data;
  int64_t stride;
  bool is64;
  __device__ int64_t load(int64_t i) const {
    return is64 ? static_cast<const int64_t*>(data)[i * stride] : static_cast<const int32_t*>(data)[i * stride];
  }
  __device__ void store(int64_t i, int64_t v) const {
    if (is64) {
      static_cast<int64_t*>(data)[i * stride] = v;
    } else {
      static_cast<int32_t*>(data)[i * stride] = int32_t(v);
    }
  }
};

struct AdvanceParams {
  int num_seqs, num_queries, block_size;
  IndexVec input_tokens;        // [num_seqs]
  IndexVec sampled;             // [num_queries] (stride of dim 0 of [num_queries, 1])
  IndexVec input_positions;     // [num_seqs]
  IndexVec seq_lens;            // [num_seqs]
  IndexVec slot_mapping;        // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, max_blocks]
  int64_t bt_stride;
  int64_t table_width;   // max_blocks: columns a row may be read at
  uint32_t* violations;  // index_check.h words of this device (may be nullptr)
};

__global__ void advance_step_kernel(AdvanceParams p) {
  const int q = blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= p.num_seqs) return;
  if (q >= p.num_queries) {
    p.input_tokens.store(q, 0);
    p.input_positions.store(q, 0);
    p.slot_mapping.store(q, -1);
    return;
  }
  const int64_t s = p.seq_lens.load(q);
  // Column s / block_size of the row; -1 (recorded below) when s is negative
  // or the column is past the width (a width of 0 has no column at all).
  const int64_t col = (s < 0 || s / p.block_size >= p.table_width) ? -1 : s / p.block_size;
  const int64_t block = checked_block_id(p.block_tables + q * p.bt_stride, col, p.table_width, 0, p.violations);
  if (block < 0) {
    p.slot_mapping.store(q, -1);  // recorded; no cache write follows this query
    return;
  }
  p.input_tokens.store(q, p.sampled.load(q));
  p.seq_lens.store(q, s + 1);
  p.input_positions.store(q, s);
  p.slot_mapping.store(q, block * p.block_size + s % p.block_size);
}

IndexVec index_vec(const Tensor& t) { return {t.data(), t.dim() > 0 ? t.stride(0) : 1, t.dtype() == DType::i64}; }

}  // namespace
}  // namespace lattn::cuda

namespace lattn::cuda {

void advance_step(int num_seqs, int num_queries, int block_size, const Tensor& input_tokens,
                  const Tensor& sampled_token_ids, const Tensor& input_positions, const Tensor& seq_lens,
                  const Tensor& slot_mapping, const Tensor& block_tables, Stream stream) {
  using namespace lattn::cuda;
  constexpr const char* op = "advance_step";
  // Sizes the host can see: every vector holds the rows the kernel touches.
  check_arg(num_seqs >= 0 && num_queries >= 0 && num_queries <= num_seqs, op, "num_queries",
            "in [0, num_seqs = " + std::to_string(num_seqs) + "]", std::to_string(num_queries));
  check_arg(block_size >= 1, op, "block_size", ">= 1", std::to_string(block_size));
  const auto check_vec = [&](const char* arg, const Tensor& t, int64_t rows) {
    check_dtype_in(op, arg, t, {DType::i32, DType::i64});
    check_arg(t.dim() >= 1 && t.size(0) >= rows, op, arg, "at least " + std::to_string(rows) + " rows", t.describe());
  };
  check_vec("input_tokens", input_tokens, num_seqs);
  check_vec("sampled_token_ids", sampled_token_ids, num_queries);
  check_vec("input_positions", input_positions, num_seqs);
  check_vec("seq_lens", seq_lens, num_seqs);
  check_vec("slot_mapping", slot_mapping, num_seqs);
  check_dtype(op, "block_tables", block_tables, DType::i32);
  check_arg(block_tables.dim() == 2 && block_tables.size(0) >= num_seqs && block_tables.stride(1) == 1, op,
            "block_tables", "[>= " + std::to_string(num_seqs) + ", max_blocks] with contiguous rows",
            block_tables.describe());
  if (num_seqs == 0) return;
  const int device = seq_lens.device().index;
  DeviceGuard guard(device);
  raise_pending_index_violation(device, op);
  AdvanceParams p{};
  p.num_seqs = num_seqs;
  p.num_queries = num_queries;
  p.block_size = block_size;
  p.input_tokens = index_vec(input_tokens);
  p.sampled = index_vec(sampled_token_ids);
  p.input_positions = index_vec(input_positions);
  p.seq_lens = index_vec(seq_lens);
  p.slot_mapping = index_vec(slot_mapping);
  p.block_tables = block_tables.data_as<const int32_t>();
  p.bt_stride = block_tables.stride(0);
  p.table_width = block_tables.size(1);
  p.violations = index_violation_words(device);
  constexpr int kThreads = 256;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  advance_step_kernel<<<(num_seqs + kThreads - 1) / kThreads, kThreads, 0, s>>>(p);
  LATTN_CUDA_CHECK_LAUNCH("advance_step_kernel");
  check_launch_indices(device, s, op, "block_tables",
                       "hold, for every real query, a block id >= 0 in column seq_len / block_size < " +
                           std::to_string(p.table_width) + " (its width)");
}

}  // namespace lattn::cuda
