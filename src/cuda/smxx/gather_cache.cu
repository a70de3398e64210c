// gather_cache on CUDA: copies the context tokens of `batch_size` requests
// from the paged cache into contiguous workspace rows, dequantizing fp8
// (x = stored * scale) into the workspace dtype. Grid (batch row, split) as
// vLLM's kernel; one warp per token row, 8 elements per lane per step.
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/common/index_check.cuh"
#include "cuda/device_ops.h"

namespace lattn::cuda {
namespace {

struct GatherParams {
  const void* cache;           // [num_blocks, block_size, D], block stride cache_block_stride
  void* dst;                   // [>= cu_seq_lens[batch], D], row stride dst_stride
  const int32_t* block_table;  // [batch, max_blocks], row stride bt_stride
  const int32_t* cu_seq_lens;  // [batch + 1]
  const int32_t* seq_starts;   // [batch] or nullptr (all 0); multiples of block_size
  int64_t cache_block_stride, dst_stride, bt_stride;
  int64_t num_blocks;   // block ids must be in [0, num_blocks)
  int64_t table_width;  // block_table columns (max_blocks)
  int64_t dst_rows;     // rows of dst
  int block_size, D;
  float scale;           // fp8 dequantization scale (1 for 16-bit caches)
  uint32_t* violations;  // index_check.h words of this device (may be nullptr)
};

constexpr int kWarps = 8;

template <class C, class Dst, bool kVec>
__global__ void __launch_bounds__(kWarps * 32) gather_cache_kernel(GatherParams p) {
  const int b = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t row0 = p.cu_seq_lens[b];
  const int64_t n = int64_t(p.cu_seq_lens[b + 1]) - row0;
  const int32_t first_block = p.seq_starts ? p.seq_starts[b] / p.block_size : 0;
  const int32_t* row = p.block_table + b * p.bt_stride;
  constexpr bool kSameType = std::is_same_v<C, Dst>;
  // Device-resident indices: a token whose block is outside the cache (or
  // past the table, or whose destination row is past dst) is skipped and
  // recorded (index_check.h); the host raises ValueError for it.
  if (row0 < 0 || (n > 0 && int64_t(row0) + n > p.dst_rows)) {
    if (threadIdx.x == 0 && blockIdx.y == 0) record_index_violation(p.violations, kBadRowRange);
    return;
  }
  for (int64_t j = blockIdx.y * kWarps + warp; j < n; j += gridDim.y * kWarps) {
    const int64_t block =
        checked_block_id(row, int64_t(first_block) + j / p.block_size, p.table_width, p.num_blocks, p.violations);
    if (block < 0) continue;
    const C* src = static_cast<const C*>(p.cache) + block * p.cache_block_stride + int64_t(j % p.block_size) * p.D;
    Dst* dst = static_cast<Dst*>(p.dst) + (row0 + j) * p.dst_stride;
    if constexpr (kVec && kSameType && sizeof(C) == 2) {
      // Bit-for-bit copy, as the seeds' gather_cache.
      for (int c = lane; c < p.D / 8; c += 32)
        reinterpret_cast<uint4*>(dst)[c] = reinterpret_cast<const uint4*>(src)[c];
    } else if constexpr (kVec) {
      for (int c = lane; c < p.D / 8; c += 32) {
        float x[8];
        load8(src + c * 8, x);
        if (sizeof(C) == 1) {
#pragma unroll
          for (int i = 0; i < 8; ++i) x[i] *= p.scale;
        }
        store8(dst + c * 8, x);
      }
    } else {
      for (int i = lane; i < p.D; i += 32) {
        if constexpr (kSameType) {
          dst[i] = src[i];
        } else {
          dst[i] = from_f32<Dst>(to_f32(src[i]) * (sizeof(C) == 1 ? p.scale : 1.f));
        }
      }
    }
  }
}

}  // namespace
}  // namespace lattn::cuda

namespace lattn::cuda {

void gather_cache(const LatentCache& cache, const Tensor& dst, const Tensor& block_table, const Tensor& cu_seq_lens,
                  int batch_size, const Tensor& seq_starts, Stream stream) {
  using namespace lattn::cuda;
  if (batch_size == 0) return;
  const int device = cache.device().index;
  DeviceGuard guard(device);
  raise_pending_index_violation(device, "gather_cache");
  GatherParams p{};
  p.cache = cache.data.data();
  p.dst = dst.data();
  p.block_table = block_table.data_as<const int32_t>();
  p.cu_seq_lens = cu_seq_lens.data_as<const int32_t>();
  p.seq_starts = seq_starts.defined() ? seq_starts.data_as<const int32_t>() : nullptr;
  p.cache_block_stride = cache.data.stride(0);
  p.dst_stride = dst.stride(0);
  p.bt_stride = block_table.stride(0);
  p.block_size = int(cache.block_size());
  p.D = int(cache.entry_dim());
  p.scale = cache.is_fp8() ? cache.scale : 1.f;
  p.num_blocks = cache.num_blocks();
  p.table_width = block_table.size(1);
  p.dst_rows = dst.size(0);
  p.violations = index_violation_words(device);
  const int cs = cache.data.element_size(), ds = dst.element_size();
  const bool vec = p.D % 8 == 0 && is_aligned(p.cache, 8 * cs) && (p.cache_block_stride * cs) % (8 * cs) == 0 &&
                   is_aligned(p.dst, 16) && (p.dst_stride * ds) % 16 == 0;
  // vLLM's split rule: fewer splits per request as the batch grows.
  const int splits = batch_size > 128 ? 2 : batch_size > 64 ? 4 : 16;
  const dim3 grid{unsigned(batch_size), unsigned(splits)};
  auto s = reinterpret_cast<cudaStream_t>(stream);
  LATTN_DISPATCH_CACHE_TYPES(cache.dtype(), "gather_cache", "cache", [&] {
    LATTN_DISPATCH_FLOAT_TYPES(dst.dtype(), "gather_cache", "dst", [&] {
      if (vec) {
        gather_cache_kernel<C, T, true><<<grid, kWarps * 32, 0, s>>>(p);
      } else {
        gather_cache_kernel<C, T, false><<<grid, kWarps * 32, 0, s>>>(p);
      }
    });
  });
  LATTN_CUDA_CHECK_LAUNCH("gather_cache_kernel");
  check_launch_indices(device, s, "gather_cache", "block_table",
                       "hold block ids in [0, num_blocks = " + std::to_string(p.num_blocks) +
                           ") for every token, "
                           "within its " +
                           std::to_string(p.table_width) + " columns");
}

}  // namespace lattn::cuda
