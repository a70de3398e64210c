// src/cpu/gemm_paths.h — the two implementations behind detail::cpu_gemm
// (internal), and a switch to force one (tests, the GEMM benchmark).
//
//   openblas:  operands converted to f32 panels, cblas_sgemm (Debian's
//              OpenBLAS, pthread build), result converted to C's dtype;
//              every dtype and stride combination.
//   bf16_dot:  bf16 A and B on an AVX512-BF16 CPU: B packed into key-pair
//              panels, a 6 x 64 register-blocked vdpbf16ps kernel, f32
//              accumulation (gemm_bf16_avx512.cpp).
// automatic picks bf16_dot whenever it applies: it measured faster on
// every MLA projection shape (docs/cpu.md, "Projections"). In batch-invariant
// mode the GEMM must not change a row's bits with M: bf16_dot (fixed K order,
// no split) where it applies, else gemm_fixed_order instead of OpenBLAS.
#pragma once

#include "core/ops/gemm.h"

namespace lattn::detail {
// The CPU GEMM: the entry of the CPU device-ops table (gemm_cpu.cpp).
void cpu_gemm(const GemmProblem& p, const RunContext& ctx);
}  // namespace lattn::detail

namespace lattn::cpu {

enum class GemmPath { automatic, openblas, bf16_dot };

// Forces a path for later cpu_gemm calls (automatic: the default choice).
// Not meant to be changed while GEMMs run.
void set_gemm_path(GemmPath path);
GemmPath gemm_path();

// True when the bf16_dot kernel can run p on this CPU (and the current
// CpuIsa allows it).
bool bf16_gemm_applies(const detail::GemmProblem& p);

void gemm_openblas(const detail::GemmProblem& p, int threads);

// Batch-invariant mode without bf16_dot: a plain f32 loop whose per-output
// summation order does not depend on M (gemm_fixed.cpp).
void gemm_fixed_order(const detail::GemmProblem& p, int threads);

// bf16_gemm_applies(p) must hold; `packed` holds gemm_bf16_workspace_bytes(p)
// bytes (64-byte aligned) for B's k-pair panels.
size_t gemm_bf16_workspace_bytes(const detail::GemmProblem& p);
void gemm_bf16_dot(const detail::GemmProblem& p, int threads, uint32_t* packed);

// The pieces gemm_bf16_dot (gemm_cpu.cpp) runs on lattn's thread pool
// (gemm_bf16_avx512.cpp has no threads of its own): with plan.packed,
// gemm_bf16_pack for every batch entry first, then gemm_bf16_item for items
// [0, plan.items) in any order and on any thread. For a few rows (decode) B
// is not packed but interleaved in registers as it is used (`packed` unused).
struct Bf16GemmPlan {
  bool packed = true;  // B packed into k-pair panels first (else read in place: m <= 48, not trans_b)
  int64_t npad = 0;    // columns padded to a multiple of 16
  int64_t panel = 0;   // uint32 per batch entry's packed panel
  int64_t row_items = 0, col_items = 0, items = 0;
};
Bf16GemmPlan gemm_bf16_plan(const detail::GemmProblem& p);
void gemm_bf16_pack(const detail::GemmProblem& p, const Bf16GemmPlan& plan, int64_t b, uint32_t* packed);
void gemm_bf16_item(const detail::GemmProblem& p, const Bf16GemmPlan& plan, int64_t item, const uint32_t* packed);

}  // namespace lattn::cpu
