// src/core/ops/gemm.h — the one GEMM shape lattn's projections need (internal).
//
// Batched, strided, row-major:  for b < batch:
//   C_b[M, N] = alpha * A_b[M, K] · B_b[K, N] + beta * C_b
//   A_b(m, k) = a[b * batch_stride_a + m * lda + k]
//   B_b(k, n) = trans_b ? b[b * batch_stride_b + n * ldb + k]      (B given as [N, K])
//                       : b[b * batch_stride_b + k * ldb + n]      (B given as [K, N])
//   C_b(m, n) = c[b * batch_stride_c + m * ldc + n]
// Element types may differ (f32/f16/bf16); accumulation is f32.
//
// The MLA projections are all this shape:
//   kv_b_proj:   [T, L] · W^T, W = [N*(P+V), L]           (trans_b, batch 1)
//   absorption:  per head n: q_nope[:, n, :] [T, P] · W_UK_T[n] [P, L]
//   V up-proj:   per head n: o[:, n, :] [T, L] · W_UV[n] [L, V]
// (strided rows through lda/ldc, heads through the batch strides).
#pragma once

#include <cstdint>

#include "lattn/backend.h"
#include "lattn/dtype.h"

namespace lattn::detail {

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  const void* a = nullptr;
  DType a_dtype = DType::f32;
  int64_t lda = 0, batch_stride_a = 0;
  const void* b = nullptr;
  DType b_dtype = DType::f32;
  int64_t ldb = 0, batch_stride_b = 0;
  bool trans_b = false;
  void* c = nullptr;
  DType c_dtype = DType::f32;
  int64_t ldc = 0, batch_stride_c = 0;
  float alpha = 1.f, beta = 0.f;
};

// Runs p on ctx.device through that device's ops table (core/ops/device_ops.h).
void gemm(const GemmProblem& p, const RunContext& ctx);

}  // namespace lattn::detail
