// The bf16_dot path of cpu_gemm (see gemm_paths.h): bf16 A and B multiplied
// with vdpbf16ps, f32 accumulation. Compiled with AVX-512 flags only; called
// only when the CPU has AVX512-BF16.
//
// B is packed per batch entry into k-pair panels bp[kp][n] (uint32 = bf16
// B(2kp, n) | B(2kp+1, n) << 16, columns zero-padded to a multiple of 16),
// so one vector holds 16 columns of one k pair; each A row contributes a
// broadcast (A(m, 2kp), A(m, 2kp+1)). A register block is 6 rows x 64
// columns (24 accumulators, 4 B vectors, 1 broadcast of 32 registers).
// Work items are (batch entry, 48 rows, 64 columns): the 64-column B panel
// (k/2 x 256 bytes, 64 KiB at k = 512) stays in L2 for the 8 row blocks.
#include <omp.h>

#include "cpu/gemm_paths.h"
#include "cpu/isa_avx512.h"
#include "cpu/simd_intrinsics.h"

namespace lattn::cpu {
namespace {

constexpr int kRowsPerBlock = 6;   // micro-kernel rows
constexpr int kVectorsPerBlock = 4;  // micro-kernel columns / 16
constexpr int64_t kColsPerItem = 16 * kVectorsPerBlock;
constexpr int64_t kRowsPerItem = 8 * kRowsPerBlock;

// No std::min here: this file has AVX-512 flags, and an out-of-line copy of
// a std template could be picked by the linker for baseline code.
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

inline uint32_t pair_bits(const uint16_t* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}

// bp [ceil(k/2)][npad] for batch entry b.
void pack_b(const detail::GemmProblem& p, int64_t b, uint32_t* bp, int64_t npad) {
  const uint16_t* src = static_cast<const uint16_t*>(p.b) + b * p.batch_stride_b;
  const int64_t pairs = (p.k + 1) / 2, full = p.k / 2;
  if (p.trans_b) {  // B(k, n) = src[n * ldb + k]: column n's pairs are contiguous
    for (int64_t n = 0; n < npad; ++n) {
      const uint16_t* row = src + n * p.ldb;
      for (int64_t kp = 0; kp < pairs; ++kp) {
        uint32_t bits = 0;
        if (n < p.n) bits = kp < full ? pair_bits(row + 2 * kp) : uint32_t(row[p.k - 1]);
        bp[kp * npad + n] = bits;
      }
    }
  } else {  // B(k, n) = src[k * ldb + n]: interleave rows 2kp and 2kp + 1
    for (int64_t kp = 0; kp < pairs; ++kp) {
      uint32_t* dst = bp + kp * npad;
      Avx512::pack_value_pairs(src + 2 * kp * p.ldb, 2 * kp + 1 < p.k ? src + (2 * kp + 1) * p.ldb : nullptr, p.n, dst);
      for (int64_t n = p.n; n < npad; ++n) dst[n] = 0;
    }
  }
}

// C rows [m0, m0 + MR) x columns [n0, n0 + 16 NV) of batch entry b.
template <int MR, int NV>
void micro_tile(const detail::GemmProblem& p, int64_t b, int64_t m0, int64_t n0, const uint32_t* bp, int64_t npad) {
  const uint16_t* a = static_cast<const uint16_t*>(p.a) + b * p.batch_stride_a + m0 * p.lda;
  const int64_t full = p.k / 2;
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const uint16_t* ar[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) ar[r] = a + r * p.lda;
  const uint32_t* bcol = bp + n0;
  for (int64_t kp = 0; kp < full; ++kp) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(bcol + kp * npad + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(pair_bits(ar[r] + 2 * kp)));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  if (p.k % 2) {  // the last pair is (A(m, k-1), 0): never read past the row
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(ar[r][p.k - 1]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, (__m512bh)_mm512_loadu_si512(bcol + full * npad + 16 * v));
      }
    }
  }
  // Epilogue: C = alpha acc + beta C, in C's dtype, masked at the right edge.
  const size_t ec = p.c_dtype == DType::f32 ? 4 : 2;
  const __m512 alpha = _mm512_set1_ps(p.alpha), beta = _mm512_set1_ps(p.beta);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    char* crow = static_cast<char*>(p.c) + size_t(b * p.batch_stride_c + (m0 + r) * p.ldc) * ec;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int64_t col = n0 + 16 * v;
      if (col >= p.n) break;
      const __mmask16 k = p.n - col >= 16 ? __mmask16(0xffff) : __mmask16((1u << (p.n - col)) - 1);
      __m512 out = _mm512_mul_ps(acc[r][v], alpha);
      if (p.beta != 0.f) out = _mm512_fmadd_ps(Avx512::load16_as_f32(crow, p.c_dtype, col, k), beta, out);
      Avx512::store16_from_f32(out, p.c_dtype, crow, col, k);
    }
  }
}

template <int MR>
void row_block(const detail::GemmProblem& p, int64_t b, int64_t m0, int64_t n0, const uint32_t* bp, int64_t npad) {
  const int64_t vectors = min64(kVectorsPerBlock, (p.n - n0 + 15) / 16);
  switch (vectors) {
    case 4: micro_tile<MR, 4>(p, b, m0, n0, bp, npad); break;
    case 3: micro_tile<MR, 3>(p, b, m0, n0, bp, npad); break;
    case 2: micro_tile<MR, 2>(p, b, m0, n0, bp, npad); break;
    default: micro_tile<MR, 1>(p, b, m0, n0, bp, npad); break;
  }
}

// Rows [m0, m1) x columns [n0, n0 + 64) of batch entry b.
void item(const detail::GemmProblem& p, int64_t b, int64_t m0, int64_t m1, int64_t n0, const uint32_t* bp,
          int64_t npad) {
  int64_t m = m0;
  for (; m + kRowsPerBlock <= m1; m += kRowsPerBlock) row_block<kRowsPerBlock>(p, b, m, n0, bp, npad);
  switch (m1 - m) {
    case 5: row_block<5>(p, b, m, n0, bp, npad); break;
    case 4: row_block<4>(p, b, m, n0, bp, npad); break;
    case 3: row_block<3>(p, b, m, n0, bp, npad); break;
    case 2: row_block<2>(p, b, m, n0, bp, npad); break;
    case 1: row_block<1>(p, b, m, n0, bp, npad); break;
    default: break;
  }
}

}  // namespace

void gemm_bf16_dot(const detail::GemmProblem& p, int threads, uint32_t* bp) {
  const int64_t npad = (p.n + 15) / 16 * 16, pairs = (p.k + 1) / 2;
  const int64_t panel = (pairs > 0 ? pairs : 1) * npad;
  const int64_t row_items = (p.m + kRowsPerItem - 1) / kRowsPerItem, col_items = (p.n + kColsPerItem - 1) / kColsPerItem;
  const int64_t items = p.batch * row_items * col_items;
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (int64_t b = 0; b < p.batch; ++b) pack_b(p, b, bp + b * panel, npad);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < items; ++i) {
      // Rows vary fastest: consecutive items reuse one B panel from L2.
      const int64_t b = i / (row_items * col_items), rest = i % (row_items * col_items);
      const int64_t n0 = (rest / row_items) * kColsPerItem, m0 = (rest % row_items) * kRowsPerItem;
      item(p, b, m0, min64(p.m, m0 + kRowsPerItem), n0, bp + b * panel, npad);
    }
  }
}

}  // namespace lattn::cpu
