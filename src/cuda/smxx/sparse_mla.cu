// Sparse absorbed MLA on CUDA (lattn/sparse.h). DeepSeek's dims (L = 512,
// R = 64) run on a tensor-core kernel (on Hopper with more than 16 heads
// sm90/sparse/, else sm80/sparse/sparse_mla_mma.cuh); other
// dims, and caches whose rows are not 16-byte aligned, run this file's simple
// portable kernel (sm80+, no tensor cores): one block per (token, group of 8
// heads), one warp per head. Key rows of a tile of 16 indices are loaded once per block
// into shared memory (fp8_ds_mla dequantized there, invalid indices zeroed),
// each warp scores them (a warp reduction per key) and keeps an online
// softmax with its 512-wide output spread over its lanes.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdlib>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/device_ops.h"
#include "cuda/smxx/sparse_mla_params.h"
#include "lattn/errors.h"
#include "lattn/sparse.h"

namespace lattn::cuda {
namespace {

constexpr int kHeadsPerBlock = 8;  // one warp each
constexpr int kKeyTile = 16;
constexpr int kMaxOutPerLane = 32;  // L <= 1024 latent columns over 32 lanes

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Element d of a cache entry as f32.
template <bool kDsMla>
__device__ __forceinline__ float entry_value(const uint8_t* e, int d, int L) {
  if constexpr (kDsMla) {
    if (d < L) {
      fp8_t v;
      v.__x = e[d];
      return float(v) * reinterpret_cast<const float*>(e + L)[d / 128];
    }
    return __bfloat162float(reinterpret_cast<const bf16_t*>(e + L + 4 * (L / 128))[d - L]);
  } else {
    return __bfloat162float(reinterpret_cast<const bf16_t*>(e)[d]);
  }
}

template <bool kDsMla>
__global__ void __launch_bounds__(kHeadsPerBlock * 32) sparse_mla_kernel(SparseParams p) {
  extern __shared__ float smem[];
  const int D = p.L + p.R;
  float* qs = smem;                                          // [kHeadsPerBlock][D] f32
  float* keys = qs + kHeadsPerBlock * D;                     // [kKeyTile][D] f32
  int* valid = reinterpret_cast<int*>(keys + kKeyTile * D);  // [kKeyTile]
  const int t = blockIdx.x, h0 = blockIdx.y * kHeadsPerBlock;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, h = h0 + warp;
  const bool active = h < p.N;

  for (int i = threadIdx.x; i < kHeadsPerBlock * D; i += blockDim.x) {
    const int hh = h0 + i / D;
    qs[i] = hh < p.N ? __bfloat162float(static_cast<const bf16_t*>(p.q)[t * p.q_stride_t + hh * p.q_stride_h + i % D])
                     : 0.f;
  }
  float o[kMaxOutPerLane];
#pragma unroll
  for (int i = 0; i < kMaxOutPerLane; ++i) o[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int32_t* idx = p.indices + t * p.idx_stride;

  for (int k0 = 0; k0 < p.topk; k0 += kKeyTile) {
    __syncthreads();  // the previous tile is consumed (and q is loaded)
    if (threadIdx.x < kKeyTile) {
      const int j = k0 + threadIdx.x;
      const int64_t slot = j < p.topk ? idx[j] : -1;
      valid[threadIdx.x] = slot >= 0 && slot < p.num_slots;  // out of range: invalid (a last guard)
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kKeyTile * D; i += blockDim.x) {
      const int kk = i / D, d = i % D;
      float v = 0.f;
      if (valid[kk]) {
        const int64_t slot = idx[k0 + kk];
        const uint8_t* e =
            p.cache + (slot / p.block_size) * p.block_stride_bytes + (slot % p.block_size) * p.entry_stride_bytes;
        v = entry_value<kDsMla>(e, d, p.L);
      }
      keys[i] = v;
    }
    __syncthreads();
    if (!active) continue;
    float s[kKeyTile];
    float tile_max = -INFINITY;
#pragma unroll
    for (int kk = 0; kk < kKeyTile; ++kk) {
      float dot = 0.f;
      for (int d = lane; d < D; d += 32) dot += qs[warp * D + d] * keys[kk * D + d];
      dot = warp_sum(dot) * p.scale;
      s[kk] = valid[kk] ? dot : -INFINITY;
      tile_max = fmaxf(tile_max, s[kk]);
    }
    if (tile_max == -INFINITY) continue;  // no valid key in this tile
    const float m_new = fmaxf(m, tile_max);
    const float alpha = m == -INFINITY ? 0.f : __expf(m - m_new);
    l *= alpha;
#pragma unroll
    for (int i = 0; i < kMaxOutPerLane; ++i) o[i] *= alpha;
#pragma unroll
    for (int kk = 0; kk < kKeyTile; ++kk) {
      const float pk = valid[kk] ? __expf(s[kk] - m_new) : 0.f;
      l += pk;
#pragma unroll
      for (int i = 0; i < kMaxOutPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < p.L) o[i] += pk * keys[kk * D + d];
      }
    }
    m = m_new;
  }
  if (!active) return;
  float factor = 0.f, row_lse = -INFINITY;
  if (l > 0.f) {
    row_lse = m + logf(l);
    factor = 1.f / l;
    if (p.sink) factor /= 1.f + expf(p.sink[h * p.sink_stride] - row_lse);
  }
  bf16_t* out = static_cast<bf16_t*>(p.out) + t * p.out_stride_t + h * p.out_stride_h;
#pragma unroll
  for (int i = 0; i < kMaxOutPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < p.L) out[d] = __float2bfloat16_rn(o[i] * factor);
  }
  if (p.lse && lane == 0) p.lse[h * p.lse_stride_h + t * p.lse_stride_t] = row_lse;
}

}  // namespace
}  // namespace lattn::cuda

namespace lattn::cuda {

void sparse_mla(const SparseMlaArgs& a, const LatentCache& cache, Stream stream) {
  DeviceGuard guard(cache.device().index);
  SparseParams p{};
  p.q = a.q.data();
  p.indices = a.indices.data_as<const int32_t>();
  p.sink = a.attn_sink.defined() ? a.attn_sink.data_as<const float>() : nullptr;
  p.sink_stride = a.attn_sink.defined() ? a.attn_sink.stride(0) : 0;
  p.cache = static_cast<const uint8_t*>(cache.data.data());
  p.out = a.out.data();
  p.lse = a.lse.defined() ? a.lse.data_as<float>() : nullptr;
  p.q_stride_t = a.q.stride(0);
  p.q_stride_h = a.q.stride(1);
  p.idx_stride = a.indices.stride(0);
  p.out_stride_t = a.out.stride(0);
  p.out_stride_h = a.out.stride(1);
  p.lse_stride_h = a.lse.defined() ? a.lse.stride(0) : 0;
  p.lse_stride_t = a.lse.defined() ? a.lse.stride(1) : 0;
  const int64_t esize = cache.data.element_size();
  p.block_stride_bytes = cache.data.stride(0) * esize;
  p.entry_stride_bytes = cache.data.stride(1) * esize;
  p.block_size = cache.block_size();
  p.num_slots = cache.num_blocks() * cache.block_size();
  p.T = int(a.q.size(0));
  p.N = int(a.q.size(1));
  p.L = cache.kv_lora_rank;
  p.R = cache.qk_rope_head_dim;
  p.topk = int(a.indices.size(1));
  p.scale = a.scale;
  if (p.T == 0 || p.N == 0) return;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  // LATTN_SPARSE_KERNEL=wgmma|mma|simple forces one kernel (tests and
  // benchmarks; a forced kernel that cannot serve the arguments is an error);
  // otherwise the first that serves them of wgmma (Hopper), mma (sm80+) and
  // the simple kernel runs.
  const char* env = std::getenv("LATTN_SPARSE_KERNEL");
  const std::string forced = env ? env : "";
  if (!forced.empty() && forced != "wgmma" && forced != "mma" && forced != "simple") {
    throw ValueError("LATTN_SPARSE_KERNEL: expected wgmma, mma or simple, got '" + forced + "'");
  }
  if (forced.empty() || forced == "wgmma") {
    const char* refusal = sparse_mla_wgmma_refusal(p);
    if (!refusal) {
      launch_sparse_mla_wgmma(p, cache.is_fp8_ds_mla(), s);
      return;
    }
    if (!forced.empty()) {
      throw ValueError(std::string("LATTN_SPARSE_KERNEL=wgmma: the Hopper sparse kernel cannot serve this call: ") +
                       refusal);
    }
  }
  if (forced.empty() || forced == "mma") {
    if (launch_sparse_mla_mma(p, cache.is_fp8_ds_mla(), s)) return;
    if (!forced.empty()) {
      throw ValueError(
          "LATTN_SPARSE_KERNEL=mma: the mma.sync sparse kernel cannot serve this call (it needs L = 512, R = 64, "
          "16-byte aligned rows and an sm80+ GPU)");
    }
  }
  const int D = p.L + p.R;
  const size_t smem = size_t(kHeadsPerBlock + kKeyTile) * D * 4 + kKeyTile * 4;
  const dim3 grid(unsigned(p.T), unsigned((p.N + kHeadsPerBlock - 1) / kHeadsPerBlock));
  if (cache.is_fp8_ds_mla()) {
    LATTN_CUDA_CHECK(
        cudaFuncSetAttribute(sparse_mla_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    sparse_mla_kernel<true><<<grid, kHeadsPerBlock * 32, smem, s>>>(p);
  } else {
    LATTN_CUDA_CHECK(
        cudaFuncSetAttribute(sparse_mla_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    sparse_mla_kernel<false><<<grid, kHeadsPerBlock * 32, smem, s>>>(p);
  }
  LATTN_CUDA_CHECK_LAUNCH("sparse_mla_kernel");
}

}  // namespace lattn::cuda
