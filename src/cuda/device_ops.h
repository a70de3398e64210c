// src/cuda/device_ops.h — the CUDA implementations behind the CUDA device-ops
// table (internal). The core reaches them only through that table
// (core/ops/device_ops.h, cuda_device_ops() in device_ops_cuda.cpp), never by
// name; see the table for each entry's shapes. Arguments arrive validated;
// index values on the device are bound-checked by the kernels
// (cuda/common/index_check.cuh).
#pragma once

#include "core/ops/device_ops_types.h"

namespace lattn::cuda {

// Memory (common/memory.cu). Errors throw RuntimeError naming the call.
void* device_malloc(size_t bytes, int device);
void device_free(void* ptr, int device) noexcept;
void memcpy_any(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream stream);
void memset_device(void* ptr, int byte, size_t bytes, int device, Stream stream);
void memcpy_2d(void* dst, size_t dst_pitch, Device dst_device, const void* src, size_t src_pitch, Device src_device,
               size_t row_bytes, size_t rows, Stream stream);
void synchronize(Stream stream);
CudaDeviceQuery query_devices();

// Ops (smxx/).
void concat_and_cache_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache, const Tensor& slot_mapping,
                          Stream stream);
void gather_cache(const LatentCache& cache, const Tensor& dst, const Tensor& block_table, const Tensor& cu_seq_lens,
                  int batch_size, const Tensor& seq_starts, Stream stream);
void merge_attn_states(const Tensor& out, const Tensor& out_lse, const Tensor& prefix_out, const Tensor& prefix_lse,
                       const Tensor& suffix_out, const Tensor& suffix_lse, Stream stream);
void copy_blocks(std::span<const LatentCache> caches, const Tensor& block_mapping, Stream stream);
void swap_blocks(const LatentCache& src, const LatentCache& dst, const Tensor& block_mapping, Stream stream);
void advance_step(int num_seqs, int num_queries, int block_size, const Tensor& input_tokens,
                  const Tensor& sampled_token_ids, const Tensor& input_positions, const Tensor& seq_lens,
                  const Tensor& slot_mapping, const Tensor& block_tables, Stream stream);
void quantize_fp8(const Tensor& src, const Tensor& dst, const Tensor& scale, Stream stream);

// Sparse MLA (lattn/sparse.h): the fp8_ds_mla cache (smxx/fp8_ds_mla_cache.cu),
// sparse attention (smxx/sparse_mla.cu), the lightning indexer (smxx/indexer.cu).
void concat_and_cache_ds_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                             const Tensor& slot_mapping, Stream stream);
void gather_cache_ds_mla(const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                         const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts, Stream stream);
void sparse_mla(const SparseMlaArgs& args, const LatentCache& cache, Stream stream);
void indexer_k_cache_write(const Tensor& k, const IndexerKeyCache& cache, const Tensor& slot_mapping, Stream stream);
// Index arrays on the host (checked by the core; uploaded here) or on the device (unchecked).
void indexer_logits(const IndexerArgs& args, const IndexerKeyCache& cache, const Tensor& logits);
void indexer_topk(const IndexerArgs& args, const IndexerKeyCache& cache, const Tensor& topk_indices);
void topk_positions(const Tensor& logits, const Tensor& lengths, const Tensor& out, Stream stream);

// cuBLAS(Lt) GEMM for device pointers (smxx/gemm_cublas.cu).
// batch_invariant: the fixed-tile kernel instead of cuBLAS (each output's K
// order fixed, no split-K, whatever M is: a row's bits do not depend on the others).
void gemm(const detail::GemmProblem& p, int device, Stream stream, bool batch_invariant = false);

}  // namespace lattn::cuda
