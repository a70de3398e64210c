// Instantiation: the Hopper decode kernel's ring32 schedule, 64 rows x 32 keys, 4 TMA stages, bf16.
#include <cuda_bf16.h>

#include "cuda/sm90/decode/ring32_instance.cuh"

LATTN_INSTANTIATE_DECODE_RING32_INSTANCE(__nv_bfloat16)
