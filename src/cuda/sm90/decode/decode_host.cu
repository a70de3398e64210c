// src/cuda/sm90/decode/decode_host.cu — host side of the Hopper decode
// kernel: eligibility, the paged-cache tensor map, and the dtype dispatch to
// the kernel instances (decode_kernel_instance.h).
#include "cuda/sm90/decode/decode_host.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cstdlib>

#include "cuda/sm90/common/tma.cuh"
#include "cuda/sm90/common/tma_host.h"
#include "cuda/sm90/decode/decode_kernel_instance.h"
#include "lattn/errors.h"

namespace lattn::cuda::sm90 {
namespace {

constexpr int kD = 576;

// The latent cache as a 3D tensor {576 columns, block_size keys, num_blocks
// pages}; a box is {64 columns, 64 keys, 1 page}: 9 boxes make a KV tile.
CUtensorMap cache_tensor_map(const DecodeParams& p, DType dtype, int64_t num_blocks) {
  const std::array<cuuint64_t, 3> dims{kD, cuuint64_t(p.block_size), cuuint64_t(num_blocks)};
  const std::array<cuuint64_t, 2> strides{kD * 2, cuuint64_t(p.cache_block_stride) * 2};
  const std::array<cuuint32_t, 3> box{64, kDecodeBlockN, 1};
  TensorMapSpec s;
  s.name = "latent cache";
  s.dtype = dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  s.base = p.cache;
  s.dims = dims;
  s.strides = strides;
  s.box = box;
  return make_tensor_map(s);
}

// The fp8 cache as a 3D byte tensor {576 columns, block_size keys,
// num_blocks pages}; a box is {64 columns, 64 keys, 1 page} with no swizzle
// ([64 keys][64 bytes] in shared memory): 9 boxes make a tile.
CUtensorMap fp8_cache_tensor_map(const DecodeParams& p, int64_t num_blocks) {
  const std::array<cuuint64_t, 3> dims{kD, cuuint64_t(p.block_size), cuuint64_t(num_blocks)};
  const std::array<cuuint64_t, 2> strides{kD, cuuint64_t(p.cache_block_stride)};
  const std::array<cuuint32_t, 3> box{64, kDecodeFp8BlockN, 1};
  TensorMapSpec s;
  s.name = "fp8 latent cache";
  s.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  s.element_bytes = 1;
  s.base = p.cache;
  s.dims = dims;
  s.strides = strides;
  s.box = box;
  s.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  return make_tensor_map(s);
}

// L2 policy of the KV copies: evict-first (streamed tiles leave L2 to what is
// reused). Measured on an H100 against evict-normal and evict-last for H128
// (two CTAs read each tile of a request): B128 S4096 434 / 431 / 462 us,
// B32 S4096 149 / 165 / 160 us (docs/perf.md). LATTN_HOPPER_KV_HINT=first|
// normal|last forces one (benchmarks).
uint64_t kv_cache_hint() {
  static const char* env = std::getenv("LATTN_HOPPER_KV_HINT");
  if (env && *env) {
    const std::string v = env;
    if (v == "first") return uint64_t(CacheHint::kEvictFirst);
    if (v == "normal") return uint64_t(CacheHint::kEvictNormal);
    if (v == "last") return uint64_t(CacheHint::kEvictLast);
    throw ValueError("LATTN_HOPPER_KV_HINT: expected first, normal or last, got '" + v + "'");
  }
  return uint64_t(CacheHint::kEvictFirst);
}

}  // namespace

std::string decode_sm90_unsupported_reason(DType dtype, DType cache_dtype, int L, int R, int block_size,
                                           const void* cache, int64_t block_stride_elems) {
  if (L != 512 || R != 64)
    return "latent dims (" + std::to_string(L) + ", " + std::to_string(R) + ") are not (512, 64)";
  if (dtype != DType::bf16 && dtype != DType::f16) return std::string("activation dtype ") + dtype_name(dtype);
  if (cache_dtype != dtype)
    return std::string("cache dtype ") + dtype_name(cache_dtype) + " differs from the activations";
  if (block_size % kDecodeBlockN != 0) return "block size " + std::to_string(block_size) + " is not a multiple of 64";
  if (cache && reinterpret_cast<uintptr_t>(cache) % 16 != 0) return "cache base is not 16-byte aligned";
  if ((block_stride_elems * 2) % 16 != 0) return "cache page stride is not a multiple of 16 bytes";
  return {};
}

std::string decode_sm90_fp8_unsupported_reason(DType dtype, DType cache_dtype, int L, int R, int block_size,
                                               const void* cache, int64_t block_stride_elems) {
  if (cache_dtype != DType::fp8_e4m3) return std::string("cache dtype ") + dtype_name(cache_dtype) + " is not fp8_e4m3";
  if (L != 512 || R != 64)
    return "latent dims (" + std::to_string(L) + ", " + std::to_string(R) + ") are not (512, 64)";
  if (dtype != DType::bf16 && dtype != DType::f16) return std::string("activation dtype ") + dtype_name(dtype);
  if (block_size % kDecodeFp8BlockN != 0)
    return "block size " + std::to_string(block_size) + " is not a multiple of 64";
  if (cache && reinterpret_cast<uintptr_t>(cache) % 16 != 0) return "cache base is not 16-byte aligned";
  if (block_stride_elems % 16 != 0) return "cache page stride is not a multiple of 16 bytes";
  return {};
}

void launch_decode_sm90_fp8(const DecodeParams& p, DType dtype, int64_t num_blocks, int m_tiles, cudaStream_t stream) {
  const CUtensorMap map = fp8_cache_tensor_map(p, num_blocks);
  const uint64_t hint = kv_cache_hint();
  switch (dtype) {
    case DType::bf16:
      return DecodeFp8KernelInstance<__nv_bfloat16>::launch(p, map, m_tiles, hint, stream);
    case DType::f16:
      return DecodeFp8KernelInstance<__half>::launch(p, map, m_tiles, hint, stream);
    default:
      throw NotImplementedError(std::string("hopper fp8 decode: activation dtype ") + dtype_name(dtype) +
                                " (supported: f16, bf16)");
  }
}

void launch_decode_sm90_km16(const DecodeParams& p, DType dtype, int64_t num_blocks, int m_tiles, cudaStream_t stream,
                             bool pdl) {
  const CUtensorMap map = cache_tensor_map(p, dtype, num_blocks);  // the same 64 x 64 swizzled boxes
  const uint64_t hint = kv_cache_hint();
  switch (dtype) {
    case DType::bf16:
      return DecodeKm16KernelInstance<__nv_bfloat16>::launch(p, map, m_tiles, hint, stream, pdl);
    case DType::f16:
      return DecodeKm16KernelInstance<__half>::launch(p, map, m_tiles, hint, stream, pdl);
    default:
      throw NotImplementedError(std::string("hopper key-major decode: activation dtype ") + dtype_name(dtype) +
                                " (supported: f16, bf16)");
  }
}

void launch_decode_sm90(const DecodeParams& p, DType dtype, int64_t num_blocks, int m_tiles, cudaStream_t stream) {
  const CUtensorMap map = cache_tensor_map(p, dtype, num_blocks);
  const uint64_t hint = kv_cache_hint();
  switch (dtype) {
    case DType::bf16:
      return DecodeKernelInstance<__nv_bfloat16>::launch(p, map, m_tiles, hint, stream);
    case DType::f16:
      return DecodeKernelInstance<__half>::launch(p, map, m_tiles, hint, stream);
    default:
      throw NotImplementedError(std::string("hopper decode: activation dtype ") + dtype_name(dtype) +
                                " (supported: f16, bf16)");
  }
}

}  // namespace lattn::cuda::sm90
