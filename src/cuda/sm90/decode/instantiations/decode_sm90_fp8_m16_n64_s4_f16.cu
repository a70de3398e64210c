// Instantiation: the key-major Hopper decode kernel for an fp8 e4m3 cache, 16 rows x 64 keys, 4 TMA stages, f16
// activations.
#include <cuda_fp16.h>

#include "cuda/sm90/decode/fp8_instance.cuh"

LATTN_INSTANTIATE_DECODE_FP8_KERNEL_INSTANCE(__half)
