// fp64 helpers of the reference backends (see cpu/reference_common.h).
#include "cpu/reference_common.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lattn::reference {

const double* F64Array::row(int64_t i0, int64_t i1) const { return values.data() + (i0 * shape[1] + i1) * shape[2]; }

F64Array load_f64(const Tensor& t) {
  F64Array a;
  a.shape.assign(t.shape().begin(), t.shape().end());
  a.values.resize(size_t(t.numel()));
  // Row-major walk over the logical shape, following the tensor's strides.
  std::vector<int64_t> index(size_t(t.dim()), 0);
  for (int64_t flat = 0; flat < t.numel(); ++flat) {
    int64_t offset = 0;
    for (int d = 0; d < t.dim(); ++d) offset += index[size_t(d)] * t.stride(d);
    a.values[size_t(flat)] = double(load_as_f32(t.data(), t.dtype(), offset));
    for (int d = t.dim() - 1; d >= 0; --d) {
      if (++index[size_t(d)] < t.size(d)) break;
      index[size_t(d)] = 0;
    }
  }
  return a;
}

double attend_one_row(const double* q, int64_t dqk, const double* k, int64_t k_stride, const double* v,
                      int64_t v_stride, int64_t dv, int64_t num_keys, double scale, double* out) {
  std::fill(out, out + dv, 0.0);
  if (num_keys == 0) return -std::numeric_limits<double>::infinity();

  std::vector<double> scores(static_cast<size_t>(num_keys));
  for (int64_t j = 0; j < num_keys; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < dqk; ++d) dot += q[d] * k[j * k_stride + d];
    scores[size_t(j)] = scale * dot;
  }
  const double max_score = *std::max_element(scores.begin(), scores.end());
  double denominator = 0;
  for (double& s : scores) {
    s = std::exp(s - max_score);
    denominator += s;
  }
  for (int64_t j = 0; j < num_keys; ++j) {
    const double p = scores[size_t(j)] / denominator;
    for (int64_t d = 0; d < dv; ++d) out[d] += p * v[j * v_stride + d];
  }
  return max_score + std::log(denominator);
}

void store_row(const Tensor& out, int64_t offset, const double* values, int64_t count, float fp8_scale) {
  const bool quantize = out.dtype() == DType::fp8_e4m3;
  for (int64_t d = 0; d < count; ++d) {
    const float v = float(values[d]);
    store_from_f32(out.data(), out.dtype(), offset + d, quantize ? v / fp8_scale : v);
  }
}

}  // namespace lattn::reference
