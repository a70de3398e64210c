// The batch-invariant GEMM on tensor cores (see gemm_invariant.h): f16/bf16
// operands, f32 accumulation, one fixed tile shape whatever the problem.
//
// Why it is batch-invariant: an output C(m, n) is accumulated by the same
// warp-level mma instructions over K in the same order (K steps of 32, each
// two 16-deep mma's, from k = 0 up) whatever M is and wherever row m sits in
// its tile: an mma computes each output from its own A row and B column, and
// rows past M are zeros that touch no other row. No split-K, no shape-driven
// algorithm choice (cuBLAS picks tiles and split-K by shape, which is why the
// mode does not use it).
#include <cuda_runtime.h>
#include <mma.h>

#include "cuda/common/cuda_check.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/smxx/gemm_invariant.h"
#include "lattn/errors.h"

namespace lattn::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBM = 64, kBN = 64, kBK = 32;  // block tile; 4 warps of 32 x 32
constexpr int kThreads = 128;
// Shared-memory row pitches (elements), padded against bank conflicts and
// kept multiples of 8 (16-bit) / 4 (f32) as wmma's loads and stores require.
constexpr int kLdA = kBK + 8, kLdB = kBN + 8, kLdC = kBN + 4;

template <class T>
__global__ void __launch_bounds__(kThreads) gemm_invariant_kernel(detail::GemmProblem p) {
  // A and B tiles for the K loop; the f32 C tile for the epilogue reuses them.
  constexpr int kAB = (kBM * kLdA + kBK * kLdB) * int(sizeof(T));
  constexpr int kCBytes = kBM * kLdC * int(sizeof(float));
  __shared__ __align__(128) unsigned char smem[kAB > kCBytes ? kAB : kCBytes];
  T* a_s = reinterpret_cast<T*>(smem);  // [kBM][kLdA]
  T* b_s = a_s + kBM * kLdA;            // [kBK][kLdB]
  float* c_s = reinterpret_cast<float*>(smem);

  const int64_t batch = blockIdx.z;
  const int64_t row0 = int64_t(blockIdx.y) * kBM, col0 = int64_t(blockIdx.x) * kBN;
  const T* A = static_cast<const T*>(p.a) + batch * p.batch_stride_a;
  const T* B = static_cast<const T*>(p.b) + batch * p.batch_stride_b;
  const int warp = int(threadIdx.x) / 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  const T zero = from_f32<T>(0.f);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  }

  for (int64_t k0 = 0; k0 < p.k; k0 += kBK) {
    // A tile [kBM, kBK]: consecutive threads read consecutive k (A rows are K-contiguous).
#pragma unroll 4
    for (int e = int(threadIdx.x); e < kBM * kBK; e += kThreads) {
      const int r = e / kBK, c = e % kBK;
      const int64_t gr = row0 + r, gk = k0 + c;
      a_s[r * kLdA + c] = gr < p.m && gk < p.k ? A[gr * p.lda + gk] : zero;
    }
    // B tile [kBK, kBN]: consecutive threads follow B's contiguous dimension.
#pragma unroll 4
    for (int e = int(threadIdx.x); e < kBK * kBN; e += kThreads) {
      int r, c;  // k, n within the tile
      if (p.trans_b) {
        c = e / kBK, r = e % kBK;  // B given as [N, K]
      } else {
        r = e / kBN, c = e % kBN;  // B given as [K, N]
      }
      const int64_t gk = k0 + r, gn = col0 + c;
      T v = zero;
      if (gk < p.k && gn < p.n) v = p.trans_b ? B[gn * p.ldb + gk] : B[gk * p.ldb + gn];
      b_s[r * kLdB + c] = v;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], a_s + (wm + 16 * i) * kLdA + kk, kLdA);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], b_s + kk * kLdB + wn + 16 * j, kLdB);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(c_s + (wm + 16 * i) * kLdC + wn + 16 * j, acc[i][j], kLdC, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int e = int(threadIdx.x); e < kBM * kBN; e += kThreads) {
    const int r = e / kBN, c = e % kBN;
    const int64_t gr = row0 + r, gc = col0 + c;
    if (gr >= p.m || gc >= p.n) continue;
    const int64_t ci = batch * p.batch_stride_c + gr * p.ldc + gc;
    float v = p.alpha * c_s[r * kLdC + c];
    if (p.beta != 0.f) v += p.beta * load_f32(p.c, p.c_dtype, ci);
    store_f32(p.c, p.c_dtype, ci, v);
  }
}

}  // namespace

bool gemm_invariant_serves(const detail::GemmProblem& p) {
  return p.a_dtype == p.b_dtype && (p.a_dtype == DType::f16 || p.a_dtype == DType::bf16) &&
         (p.c_dtype == DType::f32 || p.c_dtype == DType::f16 || p.c_dtype == DType::bf16);
}

void gemm_invariant(const detail::GemmProblem& p, Stream stream) {
  const dim3 grid(unsigned((p.n + kBN - 1) / kBN), unsigned((p.m + kBM - 1) / kBM), unsigned(p.batch));
  if (grid.y > 65535u || grid.z > 65535u) {
    throw NotImplementedError("gemm: the batch-invariant GEMM handles at most 65535 row tiles of 64 and 65535 "
                              "batches, got m=" + std::to_string(p.m) + " batch=" + std::to_string(p.batch));
  }
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (p.a_dtype == DType::bf16) {
    gemm_invariant_kernel<bf16_t><<<grid, kThreads, 0, s>>>(p);
  } else {
    gemm_invariant_kernel<f16_t><<<grid, kThreads, 0, s>>>(p);
  }
  LATTN_CUDA_CHECK_LAUNCH("gemm_invariant_kernel");
}

}  // namespace lattn::cuda
