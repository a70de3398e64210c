// Instantiation: the Hopper decode kernel, 64 rows x 64 keys, 2 TMA stages, bf16 activations and cache.
#include <cuda_bf16.h>

#include "cuda/sm90/decode/decode_kernel_instance.cuh"

LATTN_INSTANTIATE_DECODE_KERNEL_INSTANCE(__nv_bfloat16)
