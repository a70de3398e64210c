// src/cuda/smxx/sparse_mla_params.h — the arguments of the CUDA sparse MLA
// kernels (lattn/sparse.h), filled once on the host by cuda::sparse_mla and
// read by both the simple kernel (smxx/sparse_mla.cu) and the tensor-core
// kernel (sm80/sparse/). Plain C++: no CUDA header.
#pragma once

#include <cstdint>

namespace lattn::cuda {

struct SparseParams {
  const void* q;           // bf16 [T, N, D] (D = L + R), strides q_stride_t / q_stride_h (elements)
  const int32_t* indices;  // [T, topk], row stride idx_stride
  const float* sink;       // [N] (stride sink_stride) or nullptr
  const uint8_t* cache;    // [num_blocks, block_size, entry] (bf16 elements or fp8_ds_mla bytes)
  void* out;               // bf16 [T, N, L], strides out_stride_t / out_stride_h
  float* lse;              // [N, T], strides lse_stride_h / lse_stride_t, or nullptr
  int64_t q_stride_t, q_stride_h, idx_stride, sink_stride, out_stride_t, out_stride_h, lse_stride_h, lse_stride_t;
  int64_t block_stride_bytes, entry_stride_bytes, block_size, num_slots;
  int T, N, L, R, topk;
  float scale;
};

// The tensor-core kernel (sm80/sparse/sparse_mla_mma.cu) when it serves the
// arguments on the current device (L = 512, R = 64, 16-byte aligned rows,
// enough shared memory): launches and returns true; otherwise returns false
// and the caller runs the simple kernel.
bool launch_sparse_mla_mma(const SparseParams& p, bool fp8_ds_mla, void* stream);

// The Hopper kernel (sm90/sparse/): why it cannot serve the arguments on the
// current device (nullptr when it can), and its launch.
const char* sparse_mla_wgmma_refusal(const SparseParams& p);
void launch_sparse_mla_wgmma(const SparseParams& p, bool fp8_ds_mla, void* stream);

}  // namespace lattn::cuda
