// src/cpu/reference_common.h — the few loops the `reference` backends share
// (internal). Everything is fp64: inputs are widened once, scores, softmax
// and weighted sums are accumulated in double, and only the final store
// rounds to the output dtype. Readability over speed: this is the oracle.
#pragma once

#include <cstdint>
#include <vector>

#include "lattn/tensor.h"

namespace lattn::reference {

// A host tensor widened to fp64, contiguous in its own shape (row-major).
struct F64Array {
  std::vector<double> values;
  std::vector<int64_t> shape;
  const double* row(int64_t i0, int64_t i1 = 0) const;  // &values[(i0, i1, 0)] of a 3-dim array
};
// Reads any floating host tensor (any strides) into fp64.
F64Array load_f64(const Tensor& t);

// One query row attending to `num_keys` key rows (one head), all fp64:
//   s_j = scale * q · k_j,  p_j = softmax(s)_j,  out = sum_j p_j v_j.
//   q    [dqk]                        k_j = k + j * k_stride   [dqk]
//   v_j = v + j * v_stride  [dv]      out [dv] written
// Returns the LSE, log(sum_j exp(s_j)) in natural log; with no keys the
// output is 0 and the LSE -inf (a row that attended to nothing).
double attend_one_row(const double* q, int64_t dqk, const double* k, int64_t k_stride, const double* v,
                      int64_t v_stride, int64_t dv, int64_t num_keys, double scale, double* out);

// Stores fp64 values into row `offset` of an output tensor, rounding to its
// dtype; an fp8_e4m3 output stores fp8(value / fp8_scale).
void store_row(const Tensor& out, int64_t offset, const double* values, int64_t count, float fp8_scale);

}  // namespace lattn::reference
