// concat_and_cache_mla on CUDA: cache[slot] = [kv_c[t] | k_pe[t]] for every
// token t < slot_mapping.size(0) whose slot is not PAD (< 0); fp8 caches store
// fp8(x / scale). One warp per token; each lane moves 8 elements per step
// (16-byte accesses on aligned rows, coalesced across the warp).
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/common/index_check.cuh"
#include "cuda/device_ops.h"
#include "cuda/smxx/cache_write_params.h"

namespace lattn::cuda {
namespace {

struct ConcatParams : CacheWriteParams {
  float scale;           // fp8 caches store fp8(x / scale); 1 otherwise
  uint32_t* violations;  // index_check.h words of this device (may be nullptr)
};

constexpr int kWarpsPerBlock = 8;

template <class In, class C, bool kVec>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) concat_and_cache_mla_kernel(ConcatParams p) {
  const int token = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (token >= p.num_tokens) return;
  const int64_t slot = p.slots[token * p.slot_stride];
  // PAD_SLOT_ID (and any negative slot) is skipped. A slot past the cache
  // (a device-resident slot_mapping the host could not check) is skipped and
  // recorded: the host raises ValueError for it (index_check.h).
  if (slot < 0) return;
  if (slot >= p.num_slots) {
    if (lane == 0) record_index_violation(p.violations, kBadSlot);
    return;
  }
  C* dst =
      static_cast<C*>(p.cache) + (slot / p.block_size) * p.block_stride + (slot % p.block_size) * int64_t(p.L + p.R);
  const In* kv = static_cast<const In*>(p.kv_c) + token * p.kv_c_stride;
  const In* pe = static_cast<const In*>(p.k_pe) + token * p.k_pe_stride;
  const bool fp8 = sizeof(C) == 1;
  if constexpr (kVec) {
    const int chunks_l = p.L / 8, chunks = (p.L + p.R) / 8;
    for (int c = lane; c < chunks; c += 32) {
      if constexpr (std::is_same_v<In, C>) {  // same dtype: the bits as given (NaN payloads included)
        const In* src = c < chunks_l ? kv + c * 8 : pe + (c - chunks_l) * 8;
        *reinterpret_cast<uint4*>(dst + c * 8) = *reinterpret_cast<const uint4*>(src);
        continue;
      }
      float x[8];
      if (c < chunks_l) {
        load8(kv + c * 8, x);
      } else {
        load8(pe + (c - chunks_l) * 8, x);
      }
      if (fp8) {
#pragma unroll
        for (int i = 0; i < 8; ++i) x[i] /= p.scale;  // a division, as the host: x * (1/s) can round differently
      }
      store8(dst + c * 8, x);
    }
  } else {
    for (int i = lane; i < p.L + p.R; i += 32) {
      if constexpr (std::is_same_v<In, C>) {
        dst[i] = i < p.L ? kv[i] : pe[i - p.L];
        continue;
      }
      float x = i < p.L ? to_f32(kv[i]) : to_f32(pe[i - p.L]);
      if (fp8) x /= p.scale;
      dst[i] = from_f32<C>(x);
    }
  }
}

}  // namespace
}  // namespace lattn::cuda

namespace lattn::cuda {

void concat_and_cache_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache, const Tensor& slot_mapping,
                          Stream stream) {
  using namespace lattn::cuda;
  const int num_tokens = int(slot_mapping.size(0));
  if (num_tokens == 0 || cache.num_blocks() == 0) return;
  const int device = cache.device().index;
  DeviceGuard guard(device);
  raise_pending_index_violation(device, "concat_and_cache_mla");
  const ConcatParams p{cache_write_params(kv_c, k_pe, cache, slot_mapping), cache.is_fp8() ? cache.scale : 1.f,
                       index_violation_words(device)};

  const int in_size = kv_c.element_size();
  const int cache_size = cache.data.element_size();
  // 8-element vectors need both segments and every row start aligned.
  const bool vec = p.L % 8 == 0 && p.R % 8 == 0 && is_aligned(p.kv_c, 16) && is_aligned(p.k_pe, 16) &&
                   (p.kv_c_stride * in_size) % 16 == 0 && (p.k_pe_stride * in_size) % 16 == 0 &&
                   is_aligned(p.cache, 8 * cache_size) && (p.block_stride * cache_size) % (8 * cache_size) == 0;
  const dim3 grid((num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  LATTN_DISPATCH_FLOAT_TYPES(kv_c.dtype(), "concat_and_cache_mla", "kv_c", [&] {
    using In = T;
    LATTN_DISPATCH_CACHE_TYPES(cache.dtype(), "concat_and_cache_mla", "cache", [&] {
      if (vec) {
        concat_and_cache_mla_kernel<In, C, true><<<grid, kWarpsPerBlock * 32, 0, s>>>(p);
      } else {
        concat_and_cache_mla_kernel<In, C, false><<<grid, kWarpsPerBlock * 32, 0, s>>>(p);
      }
    });
  });
  LATTN_CUDA_CHECK_LAUNCH("concat_and_cache_mla_kernel");
  check_launch_indices(
      device, s, "concat_and_cache_mla", "slot_mapping",
      "hold slots < num_blocks * block_size = " + std::to_string(p.num_slots) + " (or PAD_SLOT_ID -1)");
}

}  // namespace lattn::cuda
