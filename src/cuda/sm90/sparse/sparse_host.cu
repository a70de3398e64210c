// src/cuda/sm90/sparse/sparse_host.cu — whether the Hopper (wgmma) sparse
// kernel serves the arguments on the current device, and its launch.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/smxx/sparse_mla_params.h"

namespace lattn::cuda {
namespace sm90 {
template <bool kDsMla, int kFp8Batch>
void launch_sparse_mla_sm90(const SparseParams& p, cudaStream_t stream);
}  // namespace sm90

const char* sparse_mla_wgmma_refusal(const SparseParams& p) {
#ifndef LATTN_WITH_SM90A
  (void)p;
  return "the library was built without sm_90a code (LATTN_CUDA_ARCHS without 90a)";
#else
  if (p.L != 512 || p.R != 64) return "the kernel's dims are L = 512, R = 64";
  // 64-row tiles: 16 heads or fewer run better on the mma.sync kernel's 16-row tiles.
  if (p.N <= 16) return "16 heads or fewer (the mma.sync kernel's 16-row tiles serve them)";
  const int64_t cache_bytes = (p.num_slots / p.block_size) * p.block_stride_bytes;
  if (reinterpret_cast<uintptr_t>(p.cache) % 16 != 0 || p.block_stride_bytes % 16 != 0 ||
      p.entry_stride_bytes % 16 != 0 || cache_bytes / 16 > int64_t(UINT32_MAX)) {
    return "cache rows not 16-byte aligned, or the cache past 64 GiB";
  }
  int device = 0, major = 0, minor = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  LATTN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  LATTN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) return "not a compute capability 9.0 GPU (sm_90a code)";
  return nullptr;
#endif
}

// LATTN_SPARSE_FP8_BATCH=4 (benchmarks): fp8_ds_mla rows loaded 4 at a time
// per producer warp instead of 8.
void launch_sparse_mla_wgmma(const SparseParams& p, bool fp8_ds_mla, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (!fp8_ds_mla) {
    sm90::launch_sparse_mla_sm90<false, 8>(p, s);
    return;
  }
  const char* env = std::getenv("LATTN_SPARSE_FP8_BATCH");
  if (env && std::string(env) == "4") {
    sm90::launch_sparse_mla_sm90<true, 4>(p, s);
  } else {
    sm90::launch_sparse_mla_sm90<true, 8>(p, s);
  }
}

}  // namespace lattn::cuda
