// src/cuda/smxx/decode_generic.h — the decode kernel for any latent dims and
// any cache/activation dtype pair (SIMT, no split): correct everywhere, fast
// nowhere. The tensor-core kernel (sm80/) serves (L, R) = (512, 64).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/smxx/decode_params.h"

namespace lattn::cuda {

// Largest L + R the generic kernel takes (its shared memory: (4 L + L + R) floats).
constexpr int kGenericDecodeMaxEntry = 4096;
size_t generic_decode_smem_bytes(int L, int R);

// Grid (num_tokens, num_heads); p.q_dtype / cache_dtype / out_dtype are used.
void launch_decode_generic(const DecodeParams& p, int num_tokens, cudaStream_t stream);

}  // namespace lattn::cuda
