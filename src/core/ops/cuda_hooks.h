// src/core/ops/cuda_hooks.h — the CUDA entry points the core calls (internal).
//
// Defined in src/cuda/ when lattn is built with CUDA, and by
// cuda_hooks_stub.cpp (which throws "built without CUDA") otherwise, so the
// core never includes a CUDA header and always links.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "lattn/cache.h"
#include "lattn/device.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn::cuda_hooks {

// Memory (device = CUDA ordinal). Errors throw RuntimeError naming the call.
void* device_malloc(size_t bytes, int device);
void device_free(void* ptr, int device) noexcept;
// kind: copies between any two locations; synchronous when stream == nullptr.
void memcpy_any(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream stream);
void memset_device(void* ptr, int byte, size_t bytes, int device, Stream stream);
// Copies `rows` rows of `row_bytes` bytes, row i from src + i * src_pitch to
// dst + i * dst_pitch (pitches in bytes; cudaMemcpy2D). Synchronous when
// stream == nullptr.
void memcpy_2d(void* dst, size_t dst_pitch, Device dst_device, const void* src, size_t src_pitch, Device src_device,
               size_t row_bytes, size_t rows, Stream stream);
void synchronize(Stream stream);

CudaDeviceQuery query_devices();

// Ops on device tensors (arguments already validated by the core; k_pe
// arrives squeezed to [T, R]; index values on the device are unchecked).
void concat_and_cache_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                          const Tensor& slot_mapping, Stream stream);
void gather_cache(const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                  const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts, Stream stream);
void merge_attn_states(const Tensor& out, const Tensor& out_lse, const Tensor& prefix_out, const Tensor& prefix_lse,
                       const Tensor& suffix_out, const Tensor& suffix_lse, Stream stream);
void copy_blocks(std::span<const LatentCache> caches, const Tensor& block_mapping, Stream stream);
// vLLM's advance_step_flashattn (docs/metadata.md) on device tensors:
//   input_tokens, input_positions, slot_mapping [num_seqs] int32/int64,
//   sampled_token_ids [num_queries(, 1)] int32/int64, seq_lens [num_seqs] int32/int64,
//   block_tables [num_seqs, max_blocks] int32.
void advance_step(int num_seqs, int num_queries, int block_size, const Tensor& input_tokens,
                  const Tensor& sampled_token_ids, const Tensor& input_positions, const Tensor& seq_lens,
                  const Tensor& slot_mapping, const Tensor& block_tables, Stream stream);
// Output quantization of MlaAttention::forward (arguments validated by the core):
//   src   [rows, cols] f16/bf16/f32, last dim contiguous (rows may be strided)
//   dst   [rows, cols] fp8_e4m3, last dim contiguous;  dst = fp8(src / scale[0])
//   scale [1] f32 on the same device
void quantize_fp8(const Tensor& src, const Tensor& dst, const Tensor& scale, Stream stream);

}  // namespace lattn::cuda_hooks

namespace lattn::detail {
struct GemmProblem;
}
namespace lattn::cuda_hooks {
// cuBLAS(Lt) implementation of detail::gemm for device pointers.
void gemm(const detail::GemmProblem& p, int device, Stream stream);
}  // namespace lattn::cuda_hooks
