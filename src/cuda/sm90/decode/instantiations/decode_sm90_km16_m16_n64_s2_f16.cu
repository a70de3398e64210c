// Instantiation: the key-major Hopper decode kernel for a 16-bit cache, 16 rows x 64 keys, 2 TMA stages, f16.
#include <cuda_fp16.h>

#include "cuda/sm90/decode/km16_instance.cuh"

LATTN_INSTANTIATE_DECODE_KM16_KERNEL_INSTANCE(__half)
