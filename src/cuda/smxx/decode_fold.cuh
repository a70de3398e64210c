// src/cuda/smxx/decode_fold.cuh — the left fold that merges the splits of a
// request in batch-invariant decode plans (docs/mla.md, "Batch invariance"):
//
//   acc = 0, lse = -inf;  for s = 0, 1, ..., n - 1:  (acc, lse) = fold((acc, lse), (out_s, lse_s))
//
// over the normalized split results out_s = O_s / l_s (f32) and their LSEs.
// One fixed formula, applied in split order, so the result depends on the
// splits only: the combine kernel folds partials read back from memory, and
// the sm80 decode kernel folds the splits of a request it walks itself as it
// goes (no partials), with the same bits. Both call these functions; every
// rounding step is an explicit intrinsic so that no compiler contraction can
// make the two sites differ.
//
// fold((a, la), (b, lb)): lb = -inf (the split saw no key of this row) keeps
// (a, la); la = -inf takes (b, lb); else m = max(la, lb), ea = 2^((la - m)
// log2 e), eb likewise, wa = ea / (ea + eb), wb = eb / (ea + eb), lse = m +
// ln(ea + eb), acc = wb b + wa a (one fma). A NaN LSE on either side makes
// the weights and so the row NaN (docs/mla.md, "NaN and inf").
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/fast_math.cuh"  // max_nan

namespace lattn::cuda {

struct FoldWeights {
  float wa, wb, lse;  // keep: wa 1, wb 0; take: wa 0, wb 1
};

__device__ __forceinline__ FoldWeights fold_weights(float lse_a, float lse_b) {
  if (lse_b == -INFINITY) return {1.f, 0.f, lse_a};
  if (lse_a == -INFINITY) return {0.f, 1.f, lse_b};
  constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.69314718055994531f;
  const float m = max_nan(lse_a, lse_b);
  const float ea = exp2f(__fmul_rn(__fsub_rn(lse_a, m), kLog2e));
  const float eb = exp2f(__fmul_rn(__fsub_rn(lse_b, m), kLog2e));
  const float sum = __fadd_rn(ea, eb);
  const float inv = __fdiv_rn(1.f, sum);
  return {__fmul_rn(ea, inv), __fmul_rn(eb, inv), __fadd_rn(m, __fmul_rn(log2f(sum), kLn2))};
}

// One output: wb == 0 keeps a (b may be stale: its split saw no key of the
// row), wa == 0 takes b exactly (also when a's weight underflows: then wb is
// exactly 1).
__device__ __forceinline__ float fold_elem(float a, float b, const FoldWeights& w) {
  return w.wb == 0.f ? a : (w.wa == 0.f ? b : __fmaf_rn(w.wb, b, __fmul_rn(w.wa, a)));
}

__device__ __forceinline__ float4 fold_elem4(const float4& a, const float4& b, const FoldWeights& w) {
  return make_float4(fold_elem(a.x, b.x, w), fold_elem(a.y, b.y, w), fold_elem(a.z, b.z, w), fold_elem(a.w, b.w, w));
}

}  // namespace lattn::cuda
