// src/cuda/sm90/decode/decode_host.h — the host side of the Hopper decode
// kernel (plain C++: no device code): whether a cache can take the wgmma
// path, and the launch (tensor map, dtype dispatch).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/smxx/decode_params.h"
#include "lattn/dtype.h"

namespace lattn::cuda::sm90 {

// The kernel's tile: 64 packed rows x 64 keys; page sizes must be multiples of 64.
constexpr int kDecodeBlockM = 64, kDecodeBlockN = 64;

// Empty when the Hopper kernel can read this cache with the bulk tensor copy
// engine (16-bit cache of the activation dtype, (L, R) = (512, 64), page size a
// multiple of 64, 16-byte aligned base and page stride), else why not.
std::string decode_sm90_unsupported_reason(DType dtype, DType cache_dtype, int L, int R, int block_size,
                                           const void* cache, int64_t block_stride_elems);

// The key-major kernel for an fp8 e4m3 cache (docs/hopper.md, "fp8 cache"):
// 16 packed rows x 64 keys per tile, any activation dtype of the backend
// (bf16, f16). Empty when it can read this cache (L, R) = (512, 64), page
// size a multiple of 64, 16-byte aligned base and page stride), else why not.
constexpr int kDecodeFp8BlockM = 16, kDecodeFp8BlockN = 64;
std::string decode_sm90_fp8_unsupported_reason(DType dtype, DType cache_dtype, int L, int R, int block_size,
                                               const void* cache, int64_t block_stride_elems);
// Launches it: grid (m_tiles, p.plan.num_parts), 384 threads.
void launch_decode_sm90_fp8(const DecodeParams& p, DType dtype, int64_t num_blocks, int m_tiles, cudaStream_t stream);

// The key-major kernel for a 16-bit cache and at most 16 rows per request
// (docs/hopper.md, "16-bit cache, at most 16 rows"): 16 packed rows x 64
// keys per tile; it reads what the kernel above reads
// (decode_sm90_unsupported_reason). Grid (m_tiles, p.plan.num_parts), 384
// threads; pdl: as a programmatic dependent launch (common/grid_dependency.cuh).
constexpr int kDecodeKm16BlockM = 16, kDecodeKm16BlockN = 64;
void launch_decode_sm90_km16(const DecodeParams& p, DType dtype, int64_t num_blocks, int m_tiles, cudaStream_t stream,
                             bool pdl = false);

// Launches the kernel (docs/hopper.md, "Decode"): grid (m_tiles, p.plan.num_parts), 384 threads.
// num_blocks = the cache's page count (the tensor map's outer extent).
void launch_decode_sm90(const DecodeParams& p, DType dtype, int64_t num_blocks, int m_tiles, cudaStream_t stream);

}  // namespace lattn::cuda::sm90
