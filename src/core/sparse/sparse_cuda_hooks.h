// src/core/sparse/sparse_cuda_hooks.h — the CUDA entry points of sparse MLA
// (internal): defined in src/cuda/smxx/ with CUDA, by
// sparse_cuda_hooks_stub.cpp (a clear "built without CUDA" error) without.
// Arguments arrive validated; device-resident index values are unchecked
// (kernels treat a slot outside the cache as invalid, a last guard).
#pragma once

#include "lattn/cache.h"
#include "lattn/sparse.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn::cuda_hooks {

//   kv_c [T, L], k_pe [T, R] (squeezed), slot_mapping [T'] int64, cache fp8_ds_mla
void concat_and_cache_ds_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                             const Tensor& slot_mapping, Stream stream);
//   dst [>= total, L+R] f16/bf16/f32, block_table i32, cu_seq_lens i32, seq_starts i32 or undefined
void gather_cache_ds_mla(const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                         const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts, Stream stream);
// Sparse attention (lattn/sparse.h) on device tensors; cache bf16 or fp8_ds_mla.
void sparse_mla(const SparseMlaArgs& args, const LatentCache& cache, Stream stream);
// Whether this build has the CUDA sparse kernels.
bool has_sparse_kernels();

}  // namespace lattn::cuda_hooks
