// copy_blocks (the seeds' copy_blocks_mla) on CUDA: whole blocks within each
// layer's cache. The (src, dst) pairs travel inside the kernel's parameters
// (up to kPairsPerLaunch per launch), so no device allocation or extra upload
// is needed. swap_blocks (between two caches, one may be on the host) is one
// cudaMemcpyAsync per block.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/device_ops.h"

namespace lattn::cuda {
namespace {

constexpr int kPairsPerLaunch = 1024;

struct CopyBlocksParams {
  char* cache;                        // base of one layer's cache
  int64_t block_bytes;                // bytes per block (cache stride(0) * element size)
  int64_t pairs[kPairsPerLaunch][2];  // (src block, dst block)
};

template <bool kVec>
__global__ void __launch_bounds__(256) copy_blocks_kernel(const __grid_constant__ CopyBlocksParams p) {
  const char* src = p.cache + p.pairs[blockIdx.x][0] * p.block_bytes;
  char* dst = p.cache + p.pairs[blockIdx.x][1] * p.block_bytes;
  if constexpr (kVec) {
    const int64_t n = p.block_bytes / 16;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    }
  } else {
    for (int64_t i = threadIdx.x; i < p.block_bytes; i += blockDim.x) dst[i] = src[i];
  }
}

}  // namespace
}  // namespace lattn::cuda

namespace lattn::cuda {

void copy_blocks(std::span<const LatentCache> caches, const Tensor& block_mapping, Stream stream) {
  using namespace lattn::cuda;
  const int64_t n = block_mapping.size(0);
  if (caches.empty() || n == 0) return;
  const int64_t* mapping = block_mapping.data_as<const int64_t>();
  const int64_t ms0 = block_mapping.stride(0), ms1 = block_mapping.stride(1);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  for (const LatentCache& cache : caches) {
    DeviceGuard guard(cache.device().index);
    // Kept static: the parameter block is 16 KB, too large for the stack
    // frames some callers run on; the launch copies it.
    static thread_local CopyBlocksParams p;
    p.cache = static_cast<char*>(cache.data.data());
    p.block_bytes = cache.data.stride(0) * cache.data.element_size();
    const bool vec = p.block_bytes % 16 == 0 && is_aligned(p.cache, 16);
    for (int64_t first = 0; first < n; first += kPairsPerLaunch) {
      const int count = int(std::min<int64_t>(kPairsPerLaunch, n - first));
      for (int i = 0; i < count; ++i) {
        p.pairs[i][0] = mapping[(first + i) * ms0];
        p.pairs[i][1] = mapping[(first + i) * ms0 + ms1];
      }
      if (vec) {
        copy_blocks_kernel<true><<<count, 256, 0, s>>>(p);
      } else {
        copy_blocks_kernel<false><<<count, 256, 0, s>>>(p);
      }
      LATTN_CUDA_CHECK_LAUNCH("copy_blocks_kernel");
    }
  }
}

void swap_blocks(const LatentCache& src, const LatentCache& dst, const Tensor& block_mapping, Stream stream) {
  // Blocks are contiguous runs of block_size * entry_dim elements.
  const size_t block_bytes = size_t(src.block_size() * src.entry_dim()) * size_t(src.data.element_size());
  const int64_t* mapping = block_mapping.data_as<const int64_t>();
  const int64_t ms0 = block_mapping.stride(0), ms1 = block_mapping.stride(1);
  for (int64_t i = 0; i < block_mapping.size(0); ++i) {
    const int64_t from = mapping[i * ms0], to = mapping[i * ms0 + ms1];
    const char* s = static_cast<const char*>(src.data.data()) + from * src.data.stride(0) * src.data.element_size();
    char* d = static_cast<char*>(dst.data.data()) + to * dst.data.stride(0) * dst.data.element_size();
    memcpy_any(d, dst.device(), s, src.device(), block_bytes, stream);
  }
}

}  // namespace lattn::cuda
