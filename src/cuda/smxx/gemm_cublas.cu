// cuda::gemm: lattn's batched strided row-major GEMM (core/ops/gemm.h) on
// the GPU. Same-type f16/bf16/f32 operands go to cuBLAS (f32 accumulation,
// tensor cores for 16-bit types); mixed operand types, and strides cuBLAS
// cannot express, go to a small tiled fallback kernel (f32 accumulation).
// In batch-invariant mode (a fixed K order per output, whatever M is),
// f16/bf16 GEMMs run the fixed-tile tensor-core kernel of gemm_invariant.cu
// and the others the fallback kernel.
//
// Row-major C[M,N] = A[M,K] * B[K,N] is column-major C^T[N,M] = B^T * A^T, so
// cuBLAS is called with the operands swapped and m/n exchanged.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <limits>

#include "core/ops/gemm.h"
#include "cuda/common/context.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/device_ops.h"
#include "cuda/smxx/gemm_invariant.h"

namespace lattn::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

bool fits_int(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

// Whether cuBLAS can run p: one operand type, an output of that type or f32,
// int-sized dims and leading dimensions cuBLAS accepts.
bool cublas_can_run(const detail::GemmProblem& p) {
  const bool types = p.a_dtype == p.b_dtype &&
                     (p.a_dtype == DType::f16 || p.a_dtype == DType::bf16 || p.a_dtype == DType::f32) &&
                     (p.c_dtype == p.a_dtype || p.c_dtype == DType::f32);
  if (!types) return false;
  if (!fits_int(p.m) || !fits_int(p.n) || !fits_int(p.k) || !fits_int(p.batch)) return false;
  if (!fits_int(p.lda) || !fits_int(p.ldb) || !fits_int(p.ldc)) return false;
  const int64_t ldb_min = p.trans_b ? p.k : p.n;
  return p.lda >= std::max<int64_t>(1, p.k) && p.ldb >= std::max<int64_t>(1, ldb_min) &&
         p.ldc >= std::max<int64_t>(1, p.n);
}

constexpr int kTile = 16;

// The fallback: one 16x16 output tile per block, K in 16-wide steps through
// shared memory, f32 accumulation; any element types and strides.
__global__ void __launch_bounds__(kTile* kTile) gemm_fallback_kernel(detail::GemmProblem p) {
  __shared__ float a_tile[kTile][kTile + 1];
  __shared__ float b_tile[kTile][kTile + 1];
  const int64_t b = blockIdx.z;
  const int64_t row = int64_t(blockIdx.y) * kTile + threadIdx.y;
  const int64_t col = int64_t(blockIdx.x) * kTile + threadIdx.x;
  const int64_t a_off = b * p.batch_stride_a, b_off = b * p.batch_stride_b;
  float acc = 0.f;
  for (int64_t k0 = 0; k0 < p.k; k0 += kTile) {
    const int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    a_tile[threadIdx.y][threadIdx.x] = row < p.m && ka < p.k ? load_f32(p.a, p.a_dtype, a_off + row * p.lda + ka) : 0.f;
    const int64_t b_index = p.trans_b ? b_off + col * p.ldb + kb : b_off + kb * p.ldb + col;
    b_tile[threadIdx.y][threadIdx.x] = col < p.n && kb < p.k ? load_f32(p.b, p.b_dtype, b_index) : 0.f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile; ++i) acc += a_tile[threadIdx.y][i] * b_tile[i][threadIdx.x];
    __syncthreads();
  }
  if (row < p.m && col < p.n) {
    const int64_t c_index = b * p.batch_stride_c + row * p.ldc + col;
    float v = p.alpha * acc;
    if (p.beta != 0.f) v += p.beta * load_f32(p.c, p.c_dtype, c_index);
    store_f32(p.c, p.c_dtype, c_index, v);
  }
}

}  // namespace
}  // namespace lattn::cuda

namespace lattn::cuda {

void gemm(const detail::GemmProblem& p, int device, Stream stream, bool batch_invariant) {
  using namespace lattn::cuda;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  DeviceGuard guard(device);
  // cuBLAS picks its algorithm (tiles, split-K) by shape, so a row's bits
  // follow M; the fallback kernel's K order per output is fixed.
  if (!batch_invariant && cublas_can_run(p) && p.k > 0) {
    cublasHandle_t handle = cublas_handle(device, stream);
    check_cublas(cublasGemmStridedBatchedEx(handle, p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, int(p.n),
                                            int(p.m), int(p.k), &p.alpha, p.b, cuda_type(p.b_dtype), int(p.ldb),
                                            p.batch_stride_b, p.a, cuda_type(p.a_dtype), int(p.lda), p.batch_stride_a,
                                            &p.beta, p.c, cuda_type(p.c_dtype), int(p.ldc), p.batch_stride_c,
                                            int(p.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
    return;
  }
  if (batch_invariant && gemm_invariant_serves(p)) {
    gemm_invariant(p, stream);
    return;
  }
  const dim3 block(kTile, kTile);
  const dim3 grid(unsigned((p.n + kTile - 1) / kTile), unsigned((p.m + kTile - 1) / kTile), unsigned(p.batch));
  if (grid.y > 65535u || grid.z > 65535u) {
    throw NotImplementedError("gemm: the CUDA fallback GEMM handles at most 65535 row tiles and batches, got m=" +
                              std::to_string(p.m) + " batch=" + std::to_string(p.batch));
  }
  gemm_fallback_kernel<<<grid, block, 0, reinterpret_cast<cudaStream_t>(stream)>>>(p);
  LATTN_CUDA_CHECK_LAUNCH("gemm_fallback_kernel");
}

}  // namespace lattn::cuda
