// Generated instantiation: decode kernel, 64-row x 64-key tiles, 8 warps, 2 stages, bf16 activations, fp8 cache.
// Written by scripts/gen_decode_instantiations.py from decode_config.h; do not edit.
#include "cuda/sm80/decode/decode_kernel_launcher_impl.cuh"

LATTN_INSTANTIATE_DECODE(64, 64, 8, 2, __nv_bfloat16, __nv_fp8_e4m3)
