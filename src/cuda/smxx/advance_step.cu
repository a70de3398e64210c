// advance_step on CUDA (vLLM's advance_step_flashattn, docs/metadata.md): after
// sampling, each real query q < num_queries takes its sampled token, grows its
// sequence by one and gets the slot of its new last position; padded rows
// [num_queries, num_seqs) are reset (token 0, position 0, slot PAD = -1).
#include <cuda_runtime.h>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/device_ops.h"

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
  IndexVec input_tokens;     // [num_seqs]
  IndexVec sampled;          // [num_queries] (stride of dim 0 of [num_queries, 1])
  IndexVec input_positions;  // [num_seqs]
  IndexVec seq_lens;         // [num_seqs]
  IndexVec slot_mapping;     // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, max_blocks]
  int64_t bt_stride;
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
  p.input_tokens.store(q, p.sampled.load(q));
  const int64_t s = p.seq_lens.load(q);
  p.seq_lens.store(q, s + 1);
  p.input_positions.store(q, s);
  const int64_t block = p.block_tables[q * p.bt_stride + s / p.block_size];
  p.slot_mapping.store(q, block * p.block_size + s % p.block_size);
}

IndexVec index_vec(const Tensor& t) {
  return {t.data(), t.dim() > 0 ? t.stride(0) : 1, t.dtype() == DType::i64};
}

}  // namespace
}  // namespace lattn::cuda

namespace lattn::cuda {

void advance_step(int num_seqs, int num_queries, int block_size, const Tensor& input_tokens,
                  const Tensor& sampled_token_ids, const Tensor& input_positions, const Tensor& seq_lens,
                  const Tensor& slot_mapping, const Tensor& block_tables, Stream stream) {
  using namespace lattn::cuda;
  if (num_seqs == 0) return;
  DeviceGuard guard(seq_lens.device().index);
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
  constexpr int kThreads = 256;
  advance_step_kernel<<<(num_seqs + kThreads - 1) / kThreads, kThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(p);
  LATTN_CUDA_CHECK_LAUNCH("advance_step_kernel");
}

}  // namespace lattn::cuda
