// The tensor-core sparse kernel's configurations for a fp8_ds_mla cache (656-byte rows).
#include "cuda/sm80/sparse/sparse_mla_mma_launch.cuh"

#define LATTN_INSTANTIATE_SPARSE(M, N, W)                                                                            \
  template void ::lattn::cuda::sm80::launch_sparse_mla_mma_config<::lattn::cuda::sm80::SparseTraits<M, N, W, true>>( \
      const ::lattn::cuda::SparseParams&, cudaStream_t);
LATTN_SPARSE_MMA_CONFIGS(LATTN_INSTANTIATE_SPARSE)
