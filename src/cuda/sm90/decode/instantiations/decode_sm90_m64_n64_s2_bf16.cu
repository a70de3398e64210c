// Instantiation: Hopper decode kernel, 64 rows x 64 keys, 2 TMA stages, bf16 activations and cache.
#include <cuda_bf16.h>

#include "cuda/sm90/decode/decode_launch_template.cuh"

LATTN_INSTANTIATE_DECODE_SM90(__nv_bfloat16)
