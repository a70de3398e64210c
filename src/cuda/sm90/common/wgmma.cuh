// src/cuda/sm90/common/wgmma.cuh — warpgroup matrix multiply-accumulate
// (`wgmma.mma_async`, sm_90a only; PTX ISA "Asynchronous Warpgroup Level
// Matrix Multiply-Accumulate Instructions").
//
// One warpgroup (4 consecutive warps, the first warp index divisible by 4)
// computes D[64 x N] (+)= A[64 x 16] * B[16 x N] per instruction, f32
// accumulators in registers. B always comes from shared memory through a
// matrix descriptor; A from shared memory (the "SS" form) or from registers
// (the "RS" form). The call sequence is
//     warpgroup_arrive();            // wgmma.fence: registers/smem ready
//     wgmma_ss<...>(...); ...        // issue (asynchronous)
//     wgmma_commit_group();          // close a group
//     wgmma_wait_group<0>();         // wait until <= N groups are pending
// and accumulator registers must not be touched between issue and wait.
//
// Accumulator layout (m64nNk16, f32; "Matrix fragments for wgmma .m64nNk16"):
// thread t of the warpgroup (warp w = t / 32, lane l) holds d[N / 2]; for
// column group j (8 columns), d[4j + 0..1] are row 16w + l/4, columns
// 8j + 2(l%4) + {0,1}, and d[4j + 2..3] the same columns of row 16w + l/4 + 8
// (per warp, the mma.sync m16n8 C layout). The RS A fragment (16-bit, 4
// registers) is mma.sync's m16n8k16 A layout for the warp's 16 rows: a0 =
// (row l/4, k 2(l%4)+{0,1}), a1 = (row l/4+8, same k), a2/a3 = k + 8. So the
// accumulator of one product, converted to 16 bits, is the next product's A:
// a[kk] = {pack(d[8kk], d[8kk+1]), pack(d[8kk+2], d[8kk+3]),
//          pack(d[8kk+4], d[8kk+5]), pack(d[8kk+6], d[8kk+7])}.
#pragma once

#include <cstdint>

#include "cuda/sm90/common/mbarrier.cuh"

namespace lattn::cuda::sm90 {

// ---- shared-memory matrix descriptors ---------------------------------------
// (PTX ISA "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29
// leading-dimension byte offset >> 4, 32-45 stride-dimension byte offset >> 4,
// 49-51 base offset (0: the swizzle pattern is aligned to its 1024-byte
// repeat), 62-63 swizzle mode (1 = 128-byte swizzle).
//
// Layouts used with the 128-byte swizzle (16-bit elements, 64 per 128-byte row;
// tiles written by TMA with CU_TENSOR_MAP_SWIZZLE_128B, or by hand with
// swizzle128_offset):
//  * K-major (A, or B stored as [N][K]): 64-element wide boxes of
//    [rows][64], 8-row groups 1024 bytes apart (SBO = 1024; LBO unused).
//    k16 step kk within a box starts 32 * kk bytes further; the next box of
//    64 k values is a new descriptor at the box's address.
//  * MN-major (B stored as [K][N], N contiguous; used with trans_b = 1):
//    boxes of [k rows][64 n]; the descriptor spans N (several boxes, LBO =
//    bytes between consecutive 64-wide n boxes) and 16 k rows (two 8-row
//    groups, SBO = 1024). k16 step kk starts 16 * 128 * kk bytes further.
enum class Swizzle : uint64_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

__device__ __forceinline__ uint64_t make_smem_desc(const void* smem, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                   Swizzle swizzle = Swizzle::k128B) {
  const uint64_t addr = smem_u32(smem);
  return ((addr & 0x3FFFFull) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(swizzle) << 62);
}

// K-major operand with 128-byte swizzle (see above).
__device__ __forceinline__ uint64_t make_desc_kmajor_sw128(const void* smem) { return make_smem_desc(smem, 16, 1024); }

// `desc` with its start address `bytes` (a multiple of 16) further on. The
// start field is the shared address / 16 in bits 0..13, and every shared
// address of a CTA is below 2^18 (228 KB), so the sum stays inside the field
// and only the low word changes: one add per wgmma in the issue loops, where
// rebuilding the descriptor from a pointer takes several instructions (they
// were a fifth of the fp8 decode kernel's instructions; docs/perf.md, "Shared
// memory through generic pointers").
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(desc) + (bytes >> 4));
}

// MN-major operand with 128-byte swizzle; `box_bytes` = bytes between the
// 64-element wide MN boxes (rows of the box x 128).
__device__ __forceinline__ uint64_t make_desc_mnmajor_sw128(const void* smem, uint32_t box_bytes) {
  return make_smem_desc(smem, box_bytes, 1024);
}

// ---- ordering ----------------------------------------------------------------
// wgmma.fence: before the first wgmma of a warpgroup, and whenever the
// accumulator or A registers were written by other instructions since.
__device__ __forceinline__ void warpgroup_arrive() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit_group() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator register across
// the asynchronous window (CUTLASS's warpgroup_fence_operand idea).
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
template <int kN>
__device__ __forceinline__ void fence_operands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) fence_operand(d[i]);
}

// ---- the instructions --------------------------------------------------------
// Operand lists are generated: LATTN_WGMMA_REST_<n>(X) applies X to 1 .. n-1
// (the accumulator index 0 is written out by the caller so that separators
// come before each further element).
#define LATTN_WGMMA_SEQ_1_3(X) X(1) X(2) X(3)
#define LATTN_WGMMA_SEQ_4_7(X) X(4) X(5) X(6) X(7)
#define LATTN_WGMMA_SEQ_8_15(X) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define LATTN_WGMMA_SEQ_16_31(X) \
  X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28) X(29) X(30) X(31)
#define LATTN_WGMMA_SEQ_32_47(X) \
  X(32) X(33) X(34) X(35) X(36) X(37) X(38) X(39) X(40) X(41) X(42) X(43) X(44) X(45) X(46) X(47)
#define LATTN_WGMMA_SEQ_48_63(X) \
  X(48) X(49) X(50) X(51) X(52) X(53) X(54) X(55) X(56) X(57) X(58) X(59) X(60) X(61) X(62) X(63)
#define LATTN_WGMMA_SEQ_64_79(X) \
  X(64) X(65) X(66) X(67) X(68) X(69) X(70) X(71) X(72) X(73) X(74) X(75) X(76) X(77) X(78) X(79)
#define LATTN_WGMMA_SEQ_80_95(X) \
  X(80) X(81) X(82) X(83) X(84) X(85) X(86) X(87) X(88) X(89) X(90) X(91) X(92) X(93) X(94) X(95)
#define LATTN_WGMMA_SEQ_96_111(X) \
  X(96) X(97) X(98) X(99) X(100) X(101) X(102) X(103) X(104) X(105) X(106) X(107) X(108) X(109) X(110) X(111)
#define LATTN_WGMMA_SEQ_112_127(X) \
  X(112) X(113) X(114) X(115) X(116) X(117) X(118) X(119) X(120) X(121) X(122) X(123) X(124) X(125) X(126) X(127)
#define LATTN_WGMMA_REST_4(X) LATTN_WGMMA_SEQ_1_3(X)
#define LATTN_WGMMA_REST_8(X) LATTN_WGMMA_REST_4(X) LATTN_WGMMA_SEQ_4_7(X)
#define LATTN_WGMMA_REST_16(X) LATTN_WGMMA_REST_8(X) LATTN_WGMMA_SEQ_8_15(X)
#define LATTN_WGMMA_REST_32(X) LATTN_WGMMA_REST_16(X) LATTN_WGMMA_SEQ_16_31(X)
#define LATTN_WGMMA_REST_48(X) LATTN_WGMMA_REST_32(X) LATTN_WGMMA_SEQ_32_47(X)
#define LATTN_WGMMA_REST_64(X) LATTN_WGMMA_REST_48(X) LATTN_WGMMA_SEQ_48_63(X)
#define LATTN_WGMMA_REST_96(X) LATTN_WGMMA_REST_64(X) LATTN_WGMMA_SEQ_64_79(X) LATTN_WGMMA_SEQ_80_95(X)
#define LATTN_WGMMA_REST_128(X) LATTN_WGMMA_REST_96(X) LATTN_WGMMA_SEQ_96_111(X) LATTN_WGMMA_SEQ_112_127(X)

#define LATTN_WGMMA_ACC_STR(i) ", %" #i
#define LATTN_WGMMA_ACC_ARG(i) , "+f"(d[i])
// "{%0, %1, ..., %(n-1)}" and the matching "+f" operands.
#define LATTN_WGMMA_ACC_LIST(NREG) "{%0" LATTN_WGMMA_REST_##NREG(LATTN_WGMMA_ACC_STR) "}"
#define LATTN_WGMMA_ACC_ARGS(NREG) "+f"(d[0])LATTN_WGMMA_REST_##NREG(LATTN_WGMMA_ACC_ARG)

// SS: wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T d, desc-a, desc-b,
// scale-d, imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b. Operand numbers
// after the NREG accumulators: desc-a IA, desc-b IB, scale-d IS, the transpose
// immediates ITA, ITB. scale_d = 0 ignores the accumulator (D = A * B).
#define LATTN_DEFINE_WGMMA_SS(N, NREG, PTX_T, TAG, IA, IB, IS, ITA, ITB)                                    \
  template <int kTransA, int kTransB>                                                                       \
  __device__ __forceinline__ void wgmma_ss_##TAG##_n##N(float(&d)[NREG], uint64_t desc_a, uint64_t desc_b,  \
                                                        int scale_d) {                                      \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #IS                                                 \
                 ", 0;\n"                                                                                   \
                 " wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_T "." PTX_T                         \
                 " " LATTN_WGMMA_ACC_LIST(NREG) ", %" #IA ", %" #IB ", p, 1, 1, %" #ITA ", %" #ITB ";\n}\n" \
                 : LATTN_WGMMA_ACC_ARGS(NREG)                                                               \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));                     \
  }

// RS: wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T d, {a0, a1, a2, a3},
// desc-b, scale-d, imm-scale-a, imm-scale-b, imm-trans-b (A is K-major in
// registers; no A transpose).
#define LATTN_DEFINE_WGMMA_RS(N, NREG, PTX_T, TAG, IA0, IA1, IA2, IA3, IB, IS, ITB)                              \
  template <int kTransB>                                                                                         \
  __device__ __forceinline__ void wgmma_rs_##TAG##_n##N(float(&d)[NREG], const uint32_t(&a)[4], uint64_t desc_b, \
                                                        int scale_d) {                                           \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #IS                                                      \
                 ", 0;\n"                                                                                        \
                 " wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_T "." PTX_T                              \
                 " " LATTN_WGMMA_ACC_LIST(NREG) ", {%" #IA0 ", %" #IA1 ", %" #IA2 ", %" #IA3 "}, %" #IB          \
                                                ", p, 1, 1, %" #ITB ";\n}\n"                                     \
                 : LATTN_WGMMA_ACC_ARGS(NREG)                                                                    \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));         \
  }

// Every N = 8 .. 256 that lattn's kernels use (add a line for another N).
#define LATTN_WGMMA_SHAPES(X, PTX_T, TAG)               \
  X(8, 4, PTX_T, TAG, 4, 5, 6, 7, 8, 9, 10)             \
  X(16, 8, PTX_T, TAG, 8, 9, 10, 11, 12, 13, 14)        \
  X(32, 16, PTX_T, TAG, 16, 17, 18, 19, 20, 21, 22)     \
  X(64, 32, PTX_T, TAG, 32, 33, 34, 35, 36, 37, 38)     \
  X(96, 48, PTX_T, TAG, 48, 49, 50, 51, 52, 53, 54)     \
  X(128, 64, PTX_T, TAG, 64, 65, 66, 67, 68, 69, 70)    \
  X(192, 96, PTX_T, TAG, 96, 97, 98, 99, 100, 101, 102) \
  X(256, 128, PTX_T, TAG, 128, 129, 130, 131, 132, 133, 134)
// The SS form uses the first five operand numbers after the accumulators.
#define LATTN_WGMMA_SS_FROM7(N, NREG, PTX_T, TAG, I0, I1, I2, I3, I4, I5, I6) \
  LATTN_DEFINE_WGMMA_SS(N, NREG, PTX_T, TAG, I0, I1, I2, I3, I4)
#define LATTN_WGMMA_RS_FROM7(N, NREG, PTX_T, TAG, I0, I1, I2, I3, I4, I5, I6) \
  LATTN_DEFINE_WGMMA_RS(N, NREG, PTX_T, TAG, I0, I1, I2, I3, I4, I5, I6)

LATTN_WGMMA_SHAPES(LATTN_WGMMA_SS_FROM7, "bf16", bf16)
LATTN_WGMMA_SHAPES(LATTN_WGMMA_SS_FROM7, "f16", f16)
LATTN_WGMMA_SHAPES(LATTN_WGMMA_RS_FROM7, "bf16", bf16)
LATTN_WGMMA_SHAPES(LATTN_WGMMA_RS_FROM7, "f16", f16)

// Typed entry points: T = __nv_bfloat16 or __half (16-bit operands, f32
// accumulation), N one of the shapes above. kTransA/kTransB = 1 reads the
// operand MN-major (see the descriptor notes).
#define LATTN_WGMMA_DISPATCH_SS(N, NREG, PTX_T, TAG, I0, I1, I2, I3, I4, I5, I6) \
  if constexpr (kN == N) {                                                       \
    if constexpr (kBf16) {                                                       \
      wgmma_ss_bf16_n##N<kTransA, kTransB>(d, desc_a, desc_b, scale_d);          \
    } else {                                                                     \
      wgmma_ss_f16_n##N<kTransA, kTransB>(d, desc_a, desc_b, scale_d);           \
    }                                                                            \
    return;                                                                      \
  }
#define LATTN_WGMMA_DISPATCH_RS(N, NREG, PTX_T, TAG, I0, I1, I2, I3, I4, I5, I6) \
  if constexpr (kN == N) {                                                       \
    if constexpr (kBf16) {                                                       \
      wgmma_rs_bf16_n##N<kTransB>(d, a, desc_b, scale_d);                        \
    } else {                                                                     \
      wgmma_rs_f16_n##N<kTransB>(d, a, desc_b, scale_d);                         \
    }                                                                            \
    return;                                                                      \
  }

template <int kN, bool kBf16, int kTransA = 0, int kTransB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  LATTN_WGMMA_SHAPES(LATTN_WGMMA_DISPATCH_SS, _, _)
  static_assert(kN == 8 || kN == 16 || kN == 32 || kN == 64 || kN == 96 || kN == 128 || kN == 192 || kN == 256,
                "wgmma_ss: N not generated (add it to LATTN_WGMMA_SHAPES)");
}

template <int kN, bool kBf16, int kTransB = 0>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  LATTN_WGMMA_SHAPES(LATTN_WGMMA_DISPATCH_RS, _, _)
  static_assert(kN == 8 || kN == 16 || kN == 32 || kN == 64 || kN == 96 || kN == 128 || kN == 192 || kN == 256,
                "wgmma_rs: N not generated (add it to LATTN_WGMMA_SHAPES)");
}

#undef LATTN_WGMMA_DISPATCH_SS
#undef LATTN_WGMMA_DISPATCH_RS
#undef LATTN_WGMMA_SS_FROM7
#undef LATTN_WGMMA_RS_FROM7
#undef LATTN_DEFINE_WGMMA_SS
#undef LATTN_DEFINE_WGMMA_RS

}  // namespace lattn::cuda::sm90
