// The batch-invariant GEMM on tensor cores (see gemm_invariant.h): f16/bf16
// operands, f32 accumulation, tiles whose shape never depends on M.
//
// Why it is batch-invariant: every output C(m, n) is one f32 accumulator that
// takes one mma.sync m16n8k16 per 16-deep K chunk, in K order from k = 0 up,
// whatever M is and wherever row m sits in its tile: an mma computes each
// output from its own A row and B column (rows past M are zeros that touch no
// other row), and the chain of mma's an output goes through is fixed by K
// alone. No split-K, no choice of algorithm by M (cuBLAS picks tiles and
// split-K by shape, which is why the mode does not use it). The tile shape is
// picked from N and the batch only (a request's rows are M), and how the
// tiles reach shared memory (16-byte cp.async or element loads, chosen by the
// operands' alignment) moves data without touching the K order.
//
// Structure (the classic sm80 GEMM): a kStages-deep cp.async ring of
// [BM x 32] A and [32 x BN] B tiles in padded shared memory (conflict-free
// ldmatrix), ldmatrix into mma fragments, the epilogue straight from the
// accumulators (alpha * acc + beta * C, paired stores where aligned).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/sm80/mma.cuh"
#include "cuda/smxx/gemm_invariant.h"
#include "lattn/errors.h"

namespace lattn::cuda {
namespace {

using sm80::cp_async_16;
using sm80::cp_async_commit;
using sm80::cp_async_wait;
using sm80::smem_addr;

// Compile-time tile decisions: a BM x BN block tile, K in steps of kBK,
// warps_m x warps_n warps each owning a (BM / warps_m) x (BN / warps_n) tile.
template <int BM, int BN, int WarpsM, int WarpsN, int Stages>
struct GemmTiles {
  static constexpr int kBM = BM, kBN = BN, kBK = 32, kStages = Stages;
  static constexpr int kThreads = 32 * WarpsM * WarpsN;
  static constexpr int kWarpsN = WarpsN;
  static constexpr int kWM = BM / WarpsM, kWN = BN / WarpsN;  // warp tile
  static constexpr int kMI = kWM / 16, kNI = kWN / 8;         // mma tiles per warp
  static_assert(kWM % 16 == 0 && kWN % 16 == 0, "B fragments are loaded two n8 tiles at a time");
  // Row pitches in elements, padded by 16 bytes: 8 consecutive rows' 16-byte
  // ldmatrix reads then fall in distinct banks.
  static constexpr int kLdK = kBK + 8;  // K-contiguous tiles: A [BM][kBK], B^T [BN][kBK]
  static constexpr int kLdN = BN + 8;   // N-contiguous tile: B [kBK][BN]
  static constexpr int kAElems = BM * kLdK;
  static constexpr int kBElems = BN * kLdK > kBK* kLdN ? BN* kLdK : kBK* kLdN;
  static constexpr int kSmemBytes = kStages * (kAElems + kBElems) * 2;
};
// Prefill up-projections (kv_b_proj: N of thousands, one batch): 128 x 128.
using LargeTiles = GemmTiles<128, 128, 2, 4, 3>;
// Decode's per-head GEMMs (N of 128-512, one per head): 64 x 64, more CTAs.
using SmallTiles = GemmTiles<64, 64, 2, 2, 4>;

// Copies rows [row0, row0 + rows) x K columns [k0, k0 + 32) of a K-contiguous
// operand (src(r, k) = src[r * ld + k], r < r_end, k < K; zeros elsewhere)
// into dst[rows][pitch]. kVec: 16-byte cp.async (the caller checked that the
// base, ld and K are multiples of 8 elements); else element loads.
template <class T, int kRows, int kPitch, int kThreads, bool kVec>
__device__ __forceinline__ void load_k_tile(T* dst, const T* src, int64_t ld, int64_t row0, int64_t r_end, int64_t k0,
                                            int64_t K) {
  constexpr int kChunks = kRows * 4;  // 8-element chunks of a 32-wide row
#pragma unroll
  for (int e = int(threadIdx.x); e < kChunks; e += kThreads) {
    const int r = e / 4, c = (e % 4) * 8;
    const int64_t gr = row0 + r, gk = k0 + c;
    T* d = dst + r * kPitch + c;
    if constexpr (kVec) {
      const bool in = gr < r_end && gk < K;
      cp_async_16(smem_addr(d), in ? src + gr * ld + gk : src, in ? 16 : 0);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) d[i] = gr < r_end && gk + i < K ? src[gr * ld + gk + i] : from_f32<T>(0.f);
    }
  }
}

// Copies K rows [k0, k0 + 32) x columns [col0, col0 + BN) of an N-contiguous
// operand (src(k, n) = src[k * ld + n], zeros past K or N) into dst[32][pitch].
template <class T, int kCols, int kPitch, int kThreads, bool kVec>
__device__ __forceinline__ void load_n_tile(T* dst, const T* src, int64_t ld, int64_t k0, int64_t K, int64_t col0,
                                            int64_t N) {
  constexpr int kPerRow = kCols / 8, kChunks = 32 * kPerRow;
#pragma unroll
  for (int e = int(threadIdx.x); e < kChunks; e += kThreads) {
    const int r = e / kPerRow, c = (e % kPerRow) * 8;
    const int64_t gk = k0 + r, gn = col0 + c;
    T* d = dst + r * kPitch + c;
    if constexpr (kVec) {
      const bool in = gk < K && gn < N;
      cp_async_16(smem_addr(d), in ? src + gk * ld + gn : src, in ? 16 : 0);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) d[i] = gk < K && gn + i < N ? src[gk * ld + gn + i] : from_f32<T>(0.f);
    }
  }
}

// C(gr, gc) and C(gr, gc + 1) = alpha * acc + beta * C (the second when gc + 1 < N).
__device__ __forceinline__ void store_pair(const detail::GemmProblem& p, int64_t batch, int64_t gr, int64_t gc,
                                           float v0, float v1) {
  if (gr >= p.m || gc >= p.n) return;
  const int64_t ci = batch * p.batch_stride_c + gr * p.ldc + gc;
  const bool both = gc + 1 < p.n;
  v0 *= p.alpha;
  v1 *= p.alpha;
  if (p.beta != 0.f) {
    v0 += p.beta * load_f32(p.c, p.c_dtype, ci);
    if (both) v1 += p.beta * load_f32(p.c, p.c_dtype, ci + 1);
  }
  const size_t bytes = p.c_dtype == DType::f32 ? 4 : 2;
  if (both && p.c_dtype != DType::f32 && reinterpret_cast<uintptr_t>(static_cast<char*>(p.c) + ci * bytes) % 4 == 0) {
    uint32_t packed = p.c_dtype == DType::bf16 ? sm80::pack2<bf16_t>(v0, v1) : sm80::pack2<f16_t>(v0, v1);
    *reinterpret_cast<uint32_t*>(static_cast<char*>(p.c) + ci * bytes) = packed;
    return;
  }
  if (both && p.c_dtype == DType::f32 && reinterpret_cast<uintptr_t>(static_cast<float*>(p.c) + ci) % 8 == 0) {
    *reinterpret_cast<float2*>(static_cast<float*>(p.c) + ci) = make_float2(v0, v1);
    return;
  }
  store_f32(p.c, p.c_dtype, ci, v0);
  if (both) store_f32(p.c, p.c_dtype, ci + 1, v1);
}

// Grid (N tiles, M tiles, batch). kTransB: B given as [N, K] (K-contiguous);
// else [K, N]. kVec: 16-byte copies for both operands.
template <class T, class Tiles, bool kTransB, bool kVec>
__global__ void __launch_bounds__(Tiles::kThreads)
    gemm_invariant_kernel(const __grid_constant__ detail::GemmProblem p) {
  constexpr int kBM = Tiles::kBM, kBN = Tiles::kBN, kBK = Tiles::kBK, kStages = Tiles::kStages;
  constexpr int kLdK = Tiles::kLdK, kLdN = Tiles::kLdN, kMI = Tiles::kMI, kNI = Tiles::kNI;
  constexpr int kThreads = Tiles::kThreads;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* a_s = reinterpret_cast<T*>(smem_raw);  // [kStages][kBM][kLdK]
  T* b_s = a_s + kStages * Tiles::kAElems;  // [kStages][kBN][kLdK] or [kStages][kBK][kLdN]

  const int64_t batch = blockIdx.z;
  const int64_t row0 = int64_t(blockIdx.y) * kBM, col0 = int64_t(blockIdx.x) * kBN;
  const T* A = static_cast<const T*>(p.a) + batch * p.batch_stride_a;
  const T* B = static_cast<const T*>(p.b) + batch * p.batch_stride_b;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int wm = (warp / Tiles::kWarpsN) * Tiles::kWM, wn = (warp % Tiles::kWarpsN) * Tiles::kWN;

  const auto load_stage = [&](int stage, int64_t k0) {
    load_k_tile<T, kBM, kLdK, kThreads, kVec>(a_s + stage * Tiles::kAElems, A, p.lda, row0, p.m, k0, p.k);
    T* b = b_s + stage * Tiles::kBElems;
    if constexpr (kTransB) {
      load_k_tile<T, kBN, kLdK, kThreads, kVec>(b, B, p.ldb, col0, p.n, k0, p.k);
    } else {
      load_n_tile<T, kBN, kLdN, kThreads, kVec>(b, B, p.ldb, k0, p.k, col0, p.n);
    }
  };

  float acc[kMI][kNI][4];
#pragma unroll
  for (int i = 0; i < kMI; ++i) {
#pragma unroll
    for (int j = 0; j < kNI; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
  }

  const int k_tiles = int((p.k + kBK - 1) / kBK);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, int64_t(s) * kBK);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile kt landed for every thread; stage (kt - 1) % kStages is free
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, int64_t(next) * kBK);
    cp_async_commit();

    const T* a_t = a_s + (kt % kStages) * Tiles::kAElems;
    const T* b_t = b_s + (kt % kStages) * Tiles::kBElems;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t a[kMI][4];
#pragma unroll
      for (int i = 0; i < kMI; ++i) {
        // Matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15): the m16n8k16 A fragment a0..a3.
        sm80::ldmatrix_x4(a[i], smem_addr(a_t + (wm + 16 * i + lane % 16) * kLdK + kk + (lane / 16) * 8));
      }
      uint32_t b[kNI][2];
#pragma unroll
      for (int j = 0; j < kNI; j += 2) {
        // Two n8 tiles' (b0, b1): matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
        uint32_t r[4];
        if constexpr (kTransB) {
          sm80::ldmatrix_x4(
              r, smem_addr(b_t + (wn + 8 * j + lane % 8 + (lane / 16) * 8) * kLdK + kk + ((lane / 8) % 2) * 8));
        } else {
          sm80::ldmatrix_x4_trans(
              r, smem_addr(b_t + (kk + lane % 8 + ((lane / 8) % 2) * 8) * kLdN + wn + 8 * j + (lane / 16) * 8));
        }
        b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < kMI; ++i) {
#pragma unroll
        for (int j = 0; j < kNI; ++j) sm80::mma_16816<T>(acc[i][j], a[i], b[j][0], b[j][1]);
      }
    }
  }
  cp_async_wait<0>();

  // Accumulator layout (m16n8): [0], [1] at row lane / 4, columns 2 (lane % 4) + {0, 1}; [2], [3] 8 rows below.
#pragma unroll
  for (int i = 0; i < kMI; ++i) {
#pragma unroll
    for (int j = 0; j < kNI; ++j) {
      const int64_t gr = row0 + wm + 16 * i + lane / 4, gc = col0 + wn + 8 * j + 2 * (lane % 4);
      store_pair(p, batch, gr, gc, acc[i][j][0], acc[i][j][1]);
      store_pair(p, batch, gr + 8, gc, acc[i][j][2], acc[i][j][3]);
    }
  }
}

template <class T, class Tiles, bool kTransB, bool kVec>
void launch_tiles(const detail::GemmProblem& p, cudaStream_t stream) {
  const dim3 grid(unsigned((p.n + Tiles::kBN - 1) / Tiles::kBN), unsigned((p.m + Tiles::kBM - 1) / Tiles::kBM),
                  unsigned(p.batch));
  if (grid.y > 65535u || grid.z > 65535u) {
    throw NotImplementedError("gemm: the batch-invariant GEMM handles at most 65535 row tiles of " +
                              std::to_string(Tiles::kBM) + " and 65535 batches, got m=" + std::to_string(p.m) +
                              " batch=" + std::to_string(p.batch));
  }
  auto* kernel = gemm_invariant_kernel<T, Tiles, kTransB, kVec>;
  if constexpr (Tiles::kSmemBytes > 48 * 1024) {
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tiles::kSmemBytes));
  }
  kernel<<<grid, Tiles::kThreads, Tiles::kSmemBytes, stream>>>(p);
  LATTN_CUDA_CHECK_LAUNCH("gemm_invariant_kernel");
}

template <class T, class Tiles>
void launch_typed(const detail::GemmProblem& p, bool vec, cudaStream_t stream) {
  if (p.trans_b) {
    vec ? launch_tiles<T, Tiles, true, true>(p, stream) : launch_tiles<T, Tiles, true, false>(p, stream);
  } else {
    vec ? launch_tiles<T, Tiles, false, true>(p, stream) : launch_tiles<T, Tiles, false, false>(p, stream);
  }
}

bool multiple_of_8(int64_t v) { return v % 8 == 0; }
bool aligned_16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool gemm_invariant_serves(const detail::GemmProblem& p) {
  return p.a_dtype == p.b_dtype && (p.a_dtype == DType::f16 || p.a_dtype == DType::bf16) &&
         (p.c_dtype == DType::f32 || p.c_dtype == DType::f16 || p.c_dtype == DType::bf16);
}

void gemm_invariant(const detail::GemmProblem& p, Stream stream) {
  // 16-byte copies need every 8-element chunk aligned and either wholly
  // inside the operand or wholly past it (K for K-contiguous rows, N for B's
  // N-contiguous rows).
  const bool vec = aligned_16(p.a) && aligned_16(p.b) && multiple_of_8(p.lda) && multiple_of_8(p.ldb) &&
                   multiple_of_8(p.batch_stride_a) && multiple_of_8(p.batch_stride_b) && multiple_of_8(p.k) &&
                   (p.trans_b || multiple_of_8(p.n));
  // The tile shape follows N and the batch, never M.
  const bool large = p.batch == 1 && p.n >= 1024;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (p.a_dtype == DType::bf16) {
    large ? launch_typed<bf16_t, LargeTiles>(p, vec, s) : launch_typed<bf16_t, SmallTiles>(p, vec, s);
  } else {
    large ? launch_typed<f16_t, LargeTiles>(p, vec, s) : launch_typed<f16_t, SmallTiles>(p, vec, s);
  }
}

}  // namespace lattn::cuda
