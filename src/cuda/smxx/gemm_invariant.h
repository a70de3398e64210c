// src/cuda/smxx/gemm_invariant.h — the GEMM of the batch-invariant mode on
// tensor cores: every output's K order is fixed (one mma per 16-deep K chunk
// from k = 0 up, no split-K) and the tile shape never follows M
// (gemm_invariant.cu says why that makes a row's bits independent of the
// other rows). cuda::gemm runs it in batch-invariant mode
// for the problems it serves; others keep the 16x16 f32 fallback kernel.
#pragma once

#include "core/ops/gemm.h"
#include "lattn/stream.h"

namespace lattn::cuda {

// Same-type f16/bf16 operands; C f32, f16 or bf16; any strides.
bool gemm_invariant_serves(const detail::GemmProblem& p);

// Runs p (gemm_invariant_serves(p), m, n, batch > 0) on stream.
void gemm_invariant(const detail::GemmProblem& p, Stream stream);

}  // namespace lattn::cuda
