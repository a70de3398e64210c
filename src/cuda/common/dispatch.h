// src/cuda/common/dispatch.h — runtime -> compile-time dispatch in one place.
//
// Each switch names the value it could not dispatch and the supported set,
// so an unsupported value is reported instead of silently falling through.
#pragma once

#include <string>

#include "lattn/dtype.h"
#include "lattn/errors.h"

namespace lattn::cuda {

[[noreturn]] inline void unsupported_dtype(const char* op, const char* what, DType got, const char* supported) {
  throw NotImplementedError(std::string(op) + ": " + what + " dtype " + dtype_name(got) +
                            " is not supported on CUDA (supported: " + supported + ")");
}

}  // namespace lattn::cuda

// One case of the switches below: binds `Alias` to `Type` for DType::value
// and returns what the dispatched callable returns.
#define LATTN_DISPATCH_CASE(value, Alias, Type, ...) \
  case ::lattn::DType::value: {                      \
    using Alias = Type;                              \
    return __VA_ARGS__();                            \
  }

// Binds `T` to the C++ type of a 16-bit activation dtype (f16 or bf16).
#define LATTN_DISPATCH_HALF_TYPES(dtype, op, what, ...)                 \
  [&] {                                                                 \
    switch (dtype) {                                                    \
      LATTN_DISPATCH_CASE(f16, T, ::lattn::cuda::f16_t, __VA_ARGS__)    \
      LATTN_DISPATCH_CASE(bf16, T, ::lattn::cuda::bf16_t, __VA_ARGS__)  \
      default:                                                          \
        ::lattn::cuda::unsupported_dtype(op, what, dtype, "f16, bf16"); \
    }                                                                   \
  }()

// Binds `T` to f32, f16 or bf16.
#define LATTN_DISPATCH_FLOAT_TYPES(dtype, op, what, ...)                     \
  [&] {                                                                      \
    switch (dtype) {                                                         \
      LATTN_DISPATCH_CASE(f32, T, float, __VA_ARGS__)                        \
      LATTN_DISPATCH_CASE(f16, T, ::lattn::cuda::f16_t, __VA_ARGS__)         \
      LATTN_DISPATCH_CASE(bf16, T, ::lattn::cuda::bf16_t, __VA_ARGS__)       \
      default:                                                               \
        ::lattn::cuda::unsupported_dtype(op, what, dtype, "f32, f16, bf16"); \
    }                                                                        \
  }()

// Binds `C` to a cache element type (f16, bf16 or fp8_e4m3).
#define LATTN_DISPATCH_CACHE_TYPES(dtype, op, what, ...)                          \
  [&] {                                                                           \
    switch (dtype) {                                                              \
      LATTN_DISPATCH_CASE(f16, C, ::lattn::cuda::f16_t, __VA_ARGS__)              \
      LATTN_DISPATCH_CASE(bf16, C, ::lattn::cuda::bf16_t, __VA_ARGS__)            \
      LATTN_DISPATCH_CASE(fp8_e4m3, C, ::lattn::cuda::fp8_t, __VA_ARGS__)         \
      default:                                                                    \
        ::lattn::cuda::unsupported_dtype(op, what, dtype, "f16, bf16, fp8_e4m3"); \
    }                                                                             \
  }()
