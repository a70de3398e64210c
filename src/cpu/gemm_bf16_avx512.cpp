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
//
// Few rows (m <= 48, decode's projections: one row per decode token): B is
// not packed; each k pair's two rows of B are interleaved in registers as
// they are used. Packing would read and write all of B (2 MiB per decode
// projection at DeepSeek dims) to multiply it by a handful of rows. The
// vectors and the order of the products are the packed path's, so a row's
// result has the same bits either way (it does not depend on m).
//
// No threads here: gemm_cpu.cpp runs the pack and item jobs on lattn's pool.
#include "cpu/gemm_paths.h"
#include "cpu/isa_avx512.h"
#include "cpu/simd_intrinsics.h"

namespace lattn::cpu {
namespace {

constexpr int kRowsPerBlock = 6;     // micro-kernel rows
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

// B's k pairs from the packed panel bp [ceil(k/2)][npad].
struct PackedB {
  const uint32_t* bp;
  int64_t npad;
  __m512bh load(int64_t kp, int64_t col) const { return (__m512bh)_mm512_loadu_si512(bp + kp * npad + col); }
};

// B's k pairs straight from row-major B (not trans_b): rows 2kp and 2kp + 1,
// 16 columns each, interleaved (the bits pack_b stores; zero past n and for
// the missing odd row of an odd k).
struct DirectB {
  const uint16_t* b;  // this batch entry's B
  int64_t ldb, k, n;
  __m512i idx;  // 16-bit element 2j <- even[j], 2j + 1 <- odd[j]
  __m512bh load(int64_t kp, int64_t col) const {
    const int64_t left = n - col;
    const __mmask16 m = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
    const __m512i even = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(m, b + 2 * kp * ldb + col));
    const __m512i odd = 2 * kp + 1 < k
                            ? _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(m, b + (2 * kp + 1) * ldb + col))
                            : _mm512_setzero_si512();
    return (__m512bh)_mm512_permutex2var_epi16(even, idx, odd);
  }
};

DirectB direct_b(const detail::GemmProblem& p, int64_t b) {
  alignas(64) static constexpr uint16_t kPairs[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  return DirectB{static_cast<const uint16_t*>(p.b) + b * p.batch_stride_b, p.ldb, p.k, p.n, _mm512_load_si512(kPairs)};
}

// C rows [m0, m0 + MR) x columns [n0, n0 + 16 NV) of batch entry b.
template <int MR, int NV, class BSource>
void micro_tile(const detail::GemmProblem& p, int64_t b, int64_t m0, int64_t n0, const BSource& bsrc) {
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
  for (int64_t kp = 0; kp < full; ++kp) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = bsrc.load(kp, n0 + 16 * v);
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
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bsrc.load(full, n0 + 16 * v));
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

template <int MR, class BSource>
void row_block(const detail::GemmProblem& p, int64_t b, int64_t m0, int64_t n0, const BSource& bsrc) {
  const int64_t vectors = min64(kVectorsPerBlock, (p.n - n0 + 15) / 16);
  switch (vectors) {
    case 4:
      micro_tile<MR, 4>(p, b, m0, n0, bsrc);
      break;
    case 3:
      micro_tile<MR, 3>(p, b, m0, n0, bsrc);
      break;
    case 2:
      micro_tile<MR, 2>(p, b, m0, n0, bsrc);
      break;
    default:
      micro_tile<MR, 1>(p, b, m0, n0, bsrc);
      break;
  }
}

// Rows [m0, m1) x columns [n0, n0 + 64) of batch entry b.
template <class BSource>
void item(const detail::GemmProblem& p, int64_t b, int64_t m0, int64_t m1, int64_t n0, const BSource& bsrc) {
  int64_t m = m0;
  for (; m + kRowsPerBlock <= m1; m += kRowsPerBlock) row_block<kRowsPerBlock>(p, b, m, n0, bsrc);
  switch (m1 - m) {
    case 5:
      row_block<5>(p, b, m, n0, bsrc);
      break;
    case 4:
      row_block<4>(p, b, m, n0, bsrc);
      break;
    case 3:
      row_block<3>(p, b, m, n0, bsrc);
      break;
    case 2:
      row_block<2>(p, b, m, n0, bsrc);
      break;
    case 1:
      row_block<1>(p, b, m, n0, bsrc);
      break;
    default:
      break;
  }
}

}  // namespace

Bf16GemmPlan gemm_bf16_plan(const detail::GemmProblem& p) {
  Bf16GemmPlan plan;
  plan.npad = (p.n + 15) / 16 * 16;
  const int64_t pairs = (p.k + 1) / 2;
  plan.panel = (pairs > 0 ? pairs : 1) * plan.npad;
  plan.packed = p.trans_b || p.m > kRowsPerItem;
  plan.row_items = (p.m + kRowsPerItem - 1) / kRowsPerItem;
  plan.col_items = (p.n + kColsPerItem - 1) / kColsPerItem;
  plan.items = p.batch * plan.row_items * plan.col_items;
  return plan;
}

void gemm_bf16_pack(const detail::GemmProblem& p, const Bf16GemmPlan& plan, int64_t b, uint32_t* packed) {
  pack_b(p, b, packed + b * plan.panel, plan.npad);
}

void gemm_bf16_item(const detail::GemmProblem& p, const Bf16GemmPlan& plan, int64_t i, const uint32_t* packed) {
  // Rows vary fastest: consecutive items reuse one B panel from L2.
  const int64_t per_batch = plan.row_items * plan.col_items;
  const int64_t b = i / per_batch, rest = i % per_batch;
  const int64_t n0 = (rest / plan.row_items) * kColsPerItem, m0 = (rest % plan.row_items) * kRowsPerItem;
  const int64_t m1 = min64(p.m, m0 + kRowsPerItem);
  if (plan.packed) {
    item(p, b, m0, m1, n0, PackedB{packed + b * plan.panel, plan.npad});
  } else {
    item(p, b, m0, m1, n0, direct_b(p, b));
  }
}

}  // namespace lattn::cpu
