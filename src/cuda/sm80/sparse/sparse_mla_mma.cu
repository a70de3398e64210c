// src/cuda/sm80/sparse/sparse_mla_mma.cu — picks the tensor-core sparse
// kernel's configuration for the arguments and the current device, or
// declines (the caller then runs the simple kernel of smxx/sparse_mla.cu).
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/sm80/sparse/sparse_mla_mma.cuh"  // declarations only: the instantiations live in _bf16.cu / _fp8.cu

namespace lattn::cuda {
namespace {

template <bool kDsMla>
bool launch_first_fitting(const SparseParams& p, int smem_optin, cudaStream_t stream) {
  // 16-row tiles for 16 heads or fewer (a 64-row tile would be mostly padding).
  const bool few_heads = p.N <= 16;
  bool launched = false;
#define LATTN_TRY_SPARSE(M, N, W)                       \
  if (!launched && (M == 16 || !few_heads)) {           \
    using K = sm80::SparseTraits<M, N, W, kDsMla>;      \
    if (K::kSmemBytes <= size_t(smem_optin)) {          \
      sm80::launch_sparse_mla_mma_config<K>(p, stream); \
      launched = true;                                  \
    }                                                   \
  }
  LATTN_SPARSE_MMA_CONFIGS(LATTN_TRY_SPARSE)
#undef LATTN_TRY_SPARSE
  return launched;
}

}  // namespace

bool launch_sparse_mla_mma(const SparseParams& p, bool fp8_ds_mla, void* stream) {
  if (p.L != 512 || p.R != 64) return false;  // the kernel's fixed dims (DeepSeek's 576-wide entries)
  if (int64_t(p.T) * ((p.N + 15) / 16) > int64_t(INT32_MAX)) return false;  // one grid row of (token, head tile) CTAs
  // cp.async moves 16-byte pieces of a row; slot lists hold 32-bit offsets in 16-byte units.
  const int64_t cache_bytes = (p.num_slots / p.block_size) * p.block_stride_bytes;
  if (reinterpret_cast<uintptr_t>(p.cache) % 16 != 0 || p.block_stride_bytes % 16 != 0 ||
      p.entry_stride_bytes % 16 != 0 || cache_bytes / 16 > int64_t(UINT32_MAX)) {
    return false;
  }
  int device = 0, major = 0, smem_optin = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  LATTN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  LATTN_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (major < 8) return false;
  auto s = static_cast<cudaStream_t>(stream);
  return fp8_ds_mla ? launch_first_fitting<true>(p, smem_optin, s) : launch_first_fitting<false>(p, smem_optin, s);
}

}  // namespace lattn::cuda
