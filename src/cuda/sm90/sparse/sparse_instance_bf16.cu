// The Hopper sparse kernel for a bf16 cache (1152-byte rows).
#include "cuda/sm90/sparse/sparse_launch.cuh"

template void lattn::cuda::sm90::launch_sparse_mla_sm90<false, 8>(const lattn::cuda::SparseParams&, cudaStream_t);
