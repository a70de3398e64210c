// The Hopper sparse kernel for a fp8_ds_mla cache (656-byte rows, dequantized
// to bf16 tiles): rows loaded 8 (default) or 4 at a time per producer warp.
#include "cuda/sm90/sparse/sparse_launch.cuh"

template void lattn::cuda::sm90::launch_sparse_mla_sm90<true, 8>(const lattn::cuda::SparseParams&, cudaStream_t);
template void lattn::cuda::sm90::launch_sparse_mla_sm90<true, 4>(const lattn::cuda::SparseParams&, cudaStream_t);
