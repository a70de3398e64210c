#include "support/test_data.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

namespace lattn::test {
namespace {

template <class Fn>
void for_each_element(const Tensor& t, Fn&& fn) {
  // Row-major walk over an arbitrary strided host tensor.
  const int nd = t.dim();
  if (t.numel() == 0) return;
  std::vector<int64_t> idx(size_t(nd), 0);
  int64_t off = 0, flat = 0;
  while (true) {
    fn(off, flat++);
    int d = nd - 1;
    for (; d >= 0; --d) {
      if (++idx[size_t(d)] < t.size(d)) {
        off += t.stride(d);
        break;
      }
      off -= (t.size(d) - 1) * t.stride(d);
      idx[size_t(d)] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

void fill_uniform(const Tensor& t, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  for_each_element(t, [&](int64_t off, int64_t) { store_from_f32(t.data(), t.dtype(), off, dist(rng)); });
}

void fill_normal(const Tensor& t, std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> dist(0.f, stddev);
  for_each_element(t, [&](int64_t off, int64_t) { store_from_f32(t.data(), t.dtype(), off, dist(rng)); });
}

void poison(const Tensor& t) { fill_bytes(t, 0xff); }

OwnedTensor to_host_f32(const Tensor& t) {
  Tensor src = t;
  OwnedTensor staged;
  if (!t.device().is_cpu()) {
    if (!t.is_contiguous()) throw std::runtime_error("to_host_f32: device tensors must be contiguous");
    staged = OwnedTensor::empty(t.shape(), t.dtype());
    copy_tensor(t, staged.tensor());
    src = staged.tensor();
  }
  OwnedTensor out = OwnedTensor::empty(t.shape(), DType::f32);
  copy_host(src, out.tensor());
  return out;
}

ErrorReport compare(const Tensor& got, const Tensor& ref) {
  OwnedTensor g = to_host_f32(got), r = to_host_f32(ref);
  if (g.tensor().numel() != r.tensor().numel()) throw std::runtime_error("compare: sizes differ");
  const float* gp = g.data_as<float>();
  const float* rp = r.data_as<float>();
  ErrorReport rep;
  double diff2 = 0, ref2 = 0;
  for (int64_t i = 0; i < g.tensor().numel(); ++i) {
    const double a = gp[i], b = rp[i];
    if (std::isnan(a) != std::isnan(b) || (std::isinf(a) || std::isinf(b) ? a != b : false)) {
      ++rep.nan_mismatches;
      if (rep.worst_index < 0 || rep.max_abs != std::numeric_limits<double>::infinity()) {
        rep.max_abs = std::numeric_limits<double>::infinity();
        rep.worst_index = i;
        rep.worst_got = a;
        rep.worst_ref = b;
      }
      continue;
    }
    if (std::isnan(a) || std::isinf(a)) continue;  // same non-finite value on both sides
    const double d = std::abs(a - b);
    diff2 += d * d;
    ref2 += b * b;
    if (d > rep.max_abs) {
      rep.max_abs = d;
      rep.worst_index = i;
      rep.worst_got = a;
      rep.worst_ref = b;
    }
  }
  rep.rel_l2 = rep.nan_mismatches ? std::numeric_limits<double>::infinity()
                                  : std::sqrt(diff2) / std::max(std::sqrt(ref2), 1e-30);
  return rep;
}

std::string ErrorReport::str() const {
  return "rel_l2=" + std::to_string(rel_l2) + " max_abs=" + std::to_string(max_abs) + " at flat index " +
         std::to_string(worst_index) + " (got " + std::to_string(worst_got) + ", ref " + std::to_string(worst_ref) +
         "), nan/inf mismatches=" + std::to_string(nan_mismatches);
}

double rel_tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 1e-2;  // 8-bit mantissa: unit roundoff 2^-9 ~ 2e-3, a few roundings deep
    case DType::f16:
      return 2e-3;  // 11-bit mantissa: 2^-12 ~ 2.4e-4, same depth
    case DType::f32:
      return 1e-5;
    case DType::fp8_e4m3:
      return 6e-2;  // 4-bit mantissa: 2^-5 ~ 3e-2 per rounding
    default:
      return 0;
  }
}

}  // namespace lattn::test
