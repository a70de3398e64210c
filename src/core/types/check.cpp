// Argument checks (see lattn/check.h).
#include "lattn/check.h"

#include <algorithm>

#include "lattn/errors.h"

namespace lattn {
namespace {

[[noreturn]] void refuse(const char* op, const char* arg, const std::string& expected, const std::string& got) {
  throw ValueError(std::string(op) + ": argument '" + arg + "' must " + expected + ", got " + got);
}

}  // namespace

std::string shape_pattern_str(std::initializer_list<int64_t> expected) {
  std::string s = "[";
  bool first = true;
  for (int64_t e : expected) {
    if (!first) s += ", ";
    first = false;
    s += e == kAnySize ? std::string("*") : std::to_string(e);
  }
  return s + "]";
}

void check_defined(const char* op, const char* arg, const Tensor& t) {
  if (!t.defined()) refuse(op, arg, "be a tensor", "no tensor");
}

void check_dtype(const char* op, const char* arg, const Tensor& t, DType expected) {
  check_defined(op, arg, t);
  if (t.dtype() != expected) refuse(op, arg, std::string("have dtype ") + dtype_name(expected), dtype_name(t.dtype()));
}

void check_dtype_in(const char* op, const char* arg, const Tensor& t, std::initializer_list<DType> allowed) {
  check_defined(op, arg, t);
  if (std::find(allowed.begin(), allowed.end(), t.dtype()) != allowed.end()) return;
  std::string names;
  for (DType d : allowed) names += std::string(names.empty() ? "" : ", ") + dtype_name(d);
  refuse(op, arg, "have one of the dtypes " + names, dtype_name(t.dtype()));
}

void check_device(const char* op, const char* arg, const Tensor& t, Device expected) {
  check_defined(op, arg, t);
  if (!(t.device() == expected)) refuse(op, arg, "be on " + device_name(expected), device_name(t.device()));
}

void check_dim(const char* op, const char* arg, const Tensor& t, int expected_dims) {
  check_defined(op, arg, t);
  if (t.dim() != expected_dims) {
    refuse(op, arg, "have " + std::to_string(expected_dims) + " dims",
           std::to_string(t.dim()) + " dims " + t.shape_str());
  }
}

void check_shape(const char* op, const char* arg, const Tensor& t, std::initializer_list<int64_t> expected) {
  check_defined(op, arg, t);
  bool ok = t.dim() == int(expected.size());
  int d = 0;
  for (int64_t e : expected) {
    if (!ok) break;
    if (e != kAnySize && t.size(d) != e) ok = false;
    ++d;
  }
  if (!ok) refuse(op, arg, "have shape " + shape_pattern_str(expected), t.shape_str());
}

void check_contiguous(const char* op, const char* arg, const Tensor& t) {
  check_defined(op, arg, t);
  if (!t.is_contiguous()) refuse(op, arg, "be contiguous", t.describe());
}

void check_last_dim_contiguous(const char* op, const char* arg, const Tensor& t) {
  check_defined(op, arg, t);
  if (!t.is_last_dim_contiguous()) refuse(op, arg, "have a contiguous last dim (stride 1)", t.describe());
}

void check_arg(bool ok, const char* op, const char* arg, const std::string& expected, const std::string& got) {
  if (!ok) refuse(op, arg, expected, got);
}

}  // namespace lattn
