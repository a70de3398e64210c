// tests/cpp/support/test_data.h — random test data, output poisoning and the
// error model every numeric test uses.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "lattn/tensor.h"

namespace lattn::test {

// Fills a host tensor (any float dtype, any strides) with values drawn
// uniformly from [lo, hi), rounded to its dtype.
void fill_uniform(const Tensor& t, std::mt19937_64& rng, float lo = -1.f, float hi = 1.f);
// Fills a host tensor with N(0, stddev^2).
void fill_normal(const Tensor& t, std::mt19937_64& rng, float stddev = 1.f);
// Poisons a tensor (host or device) with NaN bit patterns (0xff bytes: NaN in
// f32/f16/bf16/fp8_e4m3), so an element a kernel forgot to write fails.
void poison(const Tensor& t);

// Relative error of `got` against `ref` (both host, same shape, any float
// dtype): ||got - ref||_2 / max(||ref||_2, tiny), plus the worst element.
struct ErrorReport {
  double rel_l2 = 0;         // ||got - ref|| / ||ref||
  double max_abs = 0;        // worst |got - ref|
  int64_t worst_index = -1;  // flat index of the worst element (row-major)
  double worst_got = 0, worst_ref = 0;
  int64_t nan_mismatches = 0;  // elements where exactly one side is NaN (or both differ in inf)
  std::string str() const;
};
ErrorReport compare(const Tensor& got, const Tensor& ref);

// The tolerance of an output computed in `dtype` (inputs rounded to that
// dtype, f32 accumulation) against an fp64 reference: bf16 ~1e-2 relative,
// f16 ~2e-3, f32 ~1e-5. Never loosened to pass a test.
double rel_tolerance(DType dtype);

// Copies any tensor (host or device, any dtype/strides) into a new
// contiguous host f32 tensor.
OwnedTensor to_host_f32(const Tensor& t);

}  // namespace lattn::test
