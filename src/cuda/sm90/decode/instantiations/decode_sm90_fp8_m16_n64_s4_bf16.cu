// Instantiation: the key-major Hopper decode kernel for an fp8 e4m3 cache, 16 rows x 64 keys, 4 TMA stages, bf16
// activations.
#include <cuda_bf16.h>

#include "cuda/sm90/decode/fp8_instance.cuh"

LATTN_INSTANTIATE_DECODE_FP8_KERNEL_INSTANCE(__nv_bfloat16)
