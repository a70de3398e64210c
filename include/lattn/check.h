// lattn/check.h — argument checks used by every public entry point.
//
// Each check throws ValueError with a sentence that names the argument, what
// was expected and what was received, e.g.
//   "concat_and_cache_mla: argument 'kv_c' must have dtype bf16, got f16"
//   "forward: argument 'q' must have shape [7, 16, 192], got [7, 16, 128]"
// In expected shapes, kAnySize (-1) matches any size and prints as '*'.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "lattn/tensor.h"

namespace lattn {

constexpr int64_t kAnySize = -1;

// The argument must be a defined tensor.
void check_defined(const char* op, const char* arg, const Tensor& t);
void check_dtype(const char* op, const char* arg, const Tensor& t, DType expected);
// dtype must be one of `allowed`.
void check_dtype_in(const char* op, const char* arg, const Tensor& t, std::initializer_list<DType> allowed);
void check_device(const char* op, const char* arg, const Tensor& t, Device expected);
void check_shape(const char* op, const char* arg, const Tensor& t, std::initializer_list<int64_t> expected);
void check_dim(const char* op, const char* arg, const Tensor& t, int expected_dims);
void check_contiguous(const char* op, const char* arg, const Tensor& t);
void check_last_dim_contiguous(const char* op, const char* arg, const Tensor& t);
// A generic value check: "op: argument 'arg' must be <expected>, got <got>".
void check_arg(bool ok, const char* op, const char* arg, const std::string& expected, const std::string& got);

// Formats an expected shape: "[7, *, 192]".
std::string shape_pattern_str(std::initializer_list<int64_t> expected);

}  // namespace lattn
