// The fp8_ds_mla cache write and gather on CUDA (lattn/sparse.h). One warp
// per token: each 128-element tile is 4 elements per lane, its amax a warp
// reduction; the scale and every rounding are the host codec's
// (src/core/sparse/fp8_ds_mla.cpp), so device and host caches match bit for bit.
#include <cuda_runtime.h>

#include <cfloat>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/device_ops.h"
#include "cuda/smxx/cache_write_params.h"
#include "lattn/sparse.h"

namespace lattn::cuda {
namespace {

constexpr int kWarps = 8;

struct DsWriteParams : CacheWriteParams {
  int64_t entry_stride;  // bytes between entries (the cache is u8: block_stride is bytes too)
};

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <class In>
__global__ void __launch_bounds__(kWarps * 32) concat_ds_mla_kernel(DsWriteParams p) {
  const int token = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (token >= p.num_tokens) return;
  const int64_t slot = p.slots[token * p.slot_stride];
  if (slot < 0 || slot >= p.num_slots) return;  // PAD_SLOT_ID; out of range: a last guard
  uint8_t* entry =
      static_cast<uint8_t*>(p.cache) + (slot / p.block_size) * p.block_stride + (slot % p.block_size) * p.entry_stride;
  const In* kv = static_cast<const In*>(p.kv_c) + token * p.kv_c_stride;
  const int tiles = p.L / 128;
  for (int tile = 0; tile < tiles; ++tile) {
    float x[4], amax = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[i] = to_f32(kv[tile * 128 + lane + 32 * i]);
      if (isfinite(x[i])) amax = fmaxf(amax, fabsf(x[i]));  // NaN / inf ignored, as the host
    }
    amax = warp_max(amax);
    const float scale = fmaxf(amax / 448.f, FLT_MIN);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      entry[tile * 128 + lane + 32 * i] = from_f32<fp8_t>(x[i] / scale).__x;  // a division, as the host
    }
    if (lane == 0) reinterpret_cast<float*>(entry + p.L)[tile] = scale;
  }
  const In* pe = static_cast<const In*>(p.k_pe) + token * p.k_pe_stride;
  bf16_t* rope = reinterpret_cast<bf16_t*>(entry + p.L + 4 * tiles);
  for (int i = lane; i < p.R; i += 32) rope[i] = __float2bfloat16_rn(to_f32(pe[i]));
}

struct DsGatherParams {
  const uint8_t* cache;        // [num_blocks, block_size, bytes]
  void* dst;                   // [>= cu_seq_lens[batch], L+R], row stride dst_stride (elements)
  const int32_t* block_table;  // [batch, max_blocks], row stride bt_stride
  const int32_t* cu_seq_lens;  // [batch + 1]
  const int32_t* seq_starts;   // [batch] or nullptr
  int64_t block_stride, entry_stride, dst_stride, bt_stride;
  int block_size, L, R;
};

// The host decodes an e4m3 NaN to a quiet NaN with the byte's sign
// (0x7fc00000 / 0xffc00000) and keeps those bits through the scale and the
// rounding to the destination dtype; CUDA's conversions return their own
// canonical NaN, so a NaN is written with the host's bits (gathers are bit-exact).
template <class Dst>
__device__ __forceinline__ Dst host_nan(bool negative);
template <>
__device__ __forceinline__ float host_nan<float>(bool negative) {
  return __uint_as_float(negative ? 0xffc00000u : 0x7fc00000u);
}
template <>
__device__ __forceinline__ bf16_t host_nan<bf16_t>(bool negative) {
  return __ushort_as_bfloat16(negative ? 0xffc0u : 0x7fc0u);
}
template <>
__device__ __forceinline__ f16_t host_nan<f16_t>(bool negative) {
  return __ushort_as_half(negative ? 0xfe00u : 0x7e00u);
}

template <class Dst>
__global__ void __launch_bounds__(kWarps * 32) gather_ds_mla_kernel(DsGatherParams p) {
  const int b = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t row0 = p.cu_seq_lens[b], n = p.cu_seq_lens[b + 1] - row0;
  const int32_t first_block = p.seq_starts ? p.seq_starts[b] / p.block_size : 0;
  const int32_t* table = p.block_table + b * p.bt_stride + first_block;
  const int tiles = p.L / 128;
  for (int32_t j = blockIdx.y * kWarps + warp; j < n; j += gridDim.y * kWarps) {
    const uint8_t* e =
        p.cache + int64_t(table[j / p.block_size]) * p.block_stride + int64_t(j % p.block_size) * p.entry_stride;
    Dst* dst = static_cast<Dst*>(p.dst) + (row0 + j) * p.dst_stride;
    const float* scales = reinterpret_cast<const float*>(e + p.L);
    for (int i = lane; i < p.L; i += 32) {
      fp8_t v;
      v.__x = e[i];
      const float x = float(v) * scales[i / 128];
      dst[i] = isnan(x) ? host_nan<Dst>(e[i] & 0x80) : from_f32<Dst>(x);
    }
    const bf16_t* rope = reinterpret_cast<const bf16_t*>(e + p.L + 4 * tiles);
    for (int i = lane; i < p.R; i += 32) dst[p.L + i] = from_f32<Dst>(__bfloat162float(rope[i]));
  }
}

}  // namespace

void concat_and_cache_ds_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                             const Tensor& slot_mapping, Stream stream) {
  const int num_tokens = int(slot_mapping.size(0));
  if (num_tokens == 0 || cache.num_blocks() == 0) return;
  DeviceGuard guard(cache.device().index);
  const DsWriteParams p{cache_write_params(kv_c, k_pe, cache, slot_mapping), cache.data.stride(1)};
  const dim3 grid((num_tokens + kWarps - 1) / kWarps);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  LATTN_DISPATCH_FLOAT_TYPES(kv_c.dtype(), "concat_and_cache_mla", "kv_c",
                             [&] { concat_ds_mla_kernel<T><<<grid, kWarps * 32, 0, s>>>(p); });
  LATTN_CUDA_CHECK_LAUNCH("concat_ds_mla_kernel");
}

void gather_cache_ds_mla(const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                         const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts, Stream stream) {
  if (batch_size == 0) return;
  DeviceGuard guard(cache.device().index);
  DsGatherParams p{};
  p.cache = static_cast<const uint8_t*>(cache.data.data());
  p.dst = dst.data();
  p.block_table = block_table.data_as<const int32_t>();
  p.cu_seq_lens = cu_seq_lens.data_as<const int32_t>();
  p.seq_starts = seq_starts.defined() ? seq_starts.data_as<const int32_t>() : nullptr;
  p.block_stride = cache.data.stride(0);
  p.entry_stride = cache.data.stride(1);
  p.dst_stride = dst.stride(0);
  p.bt_stride = block_table.stride(0);
  p.block_size = int(cache.block_size());
  p.L = cache.kv_lora_rank;
  p.R = cache.qk_rope_head_dim;
  const int splits = batch_size > 128 ? 2 : batch_size > 64 ? 4 : 16;
  const dim3 grid{unsigned(batch_size), unsigned(splits)};
  auto s = reinterpret_cast<cudaStream_t>(stream);
  LATTN_DISPATCH_FLOAT_TYPES(dst.dtype(), "gather_cache", "dst",
                             [&] { gather_ds_mla_kernel<T><<<grid, kWarps * 32, 0, s>>>(p); });
  LATTN_CUDA_CHECK_LAUNCH("gather_ds_mla_kernel");
}

}  // namespace lattn::cuda
