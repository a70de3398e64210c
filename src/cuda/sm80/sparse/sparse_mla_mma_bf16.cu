// The tensor-core sparse kernel's configurations for a bf16 cache.
#include "cuda/sm80/sparse/sparse_mla_mma_launch.cuh"

#define LATTN_INSTANTIATE_SPARSE(M, N, W)                                                                             \
  template void ::lattn::cuda::sm80::launch_sparse_mla_mma_config<::lattn::cuda::sm80::SparseTraits<M, N, W, false>>( \
      const ::lattn::cuda::SparseParams&, cudaStream_t);
LATTN_SPARSE_MMA_CONFIGS(LATTN_INSTANTIATE_SPARSE)
