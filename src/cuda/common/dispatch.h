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

// Binds `T` to the C++ type of a 16-bit activation dtype (f16 or bf16).
#define LATTN_DISPATCH_HALF_TYPES(dtype, op, what, ...)                 \
  [&] {                                                                 \
    switch (dtype) {                                                    \
      case ::lattn::DType::f16: {                                       \
        using T = ::lattn::cuda::f16_t;                                 \
        return __VA_ARGS__();                                           \
      }                                                                 \
      case ::lattn::DType::bf16: {                                      \
        using T = ::lattn::cuda::bf16_t;                                \
        return __VA_ARGS__();                                           \
      }                                                                 \
      default:                                                          \
        ::lattn::cuda::unsupported_dtype(op, what, dtype, "f16, bf16"); \
    }                                                                   \
  }()

// Binds `T` to f32, f16 or bf16.
#define LATTN_DISPATCH_FLOAT_TYPES(dtype, op, what, ...)                     \
  [&] {                                                                      \
    switch (dtype) {                                                         \
      case ::lattn::DType::f32: {                                            \
        using T = float;                                                     \
        return __VA_ARGS__();                                                \
      }                                                                      \
      case ::lattn::DType::f16: {                                            \
        using T = ::lattn::cuda::f16_t;                                      \
        return __VA_ARGS__();                                                \
      }                                                                      \
      case ::lattn::DType::bf16: {                                           \
        using T = ::lattn::cuda::bf16_t;                                     \
        return __VA_ARGS__();                                                \
      }                                                                      \
      default:                                                               \
        ::lattn::cuda::unsupported_dtype(op, what, dtype, "f32, f16, bf16"); \
    }                                                                        \
  }()

// Binds `C` to a cache element type (f16, bf16 or fp8_e4m3).
#define LATTN_DISPATCH_CACHE_TYPES(dtype, op, what, ...)                          \
  [&] {                                                                           \
    switch (dtype) {                                                              \
      case ::lattn::DType::f16: {                                                 \
        using C = ::lattn::cuda::f16_t;                                           \
        return __VA_ARGS__();                                                     \
      }                                                                           \
      case ::lattn::DType::bf16: {                                                \
        using C = ::lattn::cuda::bf16_t;                                          \
        return __VA_ARGS__();                                                     \
      }                                                                           \
      case ::lattn::DType::fp8_e4m3: {                                            \
        using C = ::lattn::cuda::fp8_t;                                           \
        return __VA_ARGS__();                                                     \
      }                                                                           \
      default:                                                                    \
        ::lattn::cuda::unsupported_dtype(op, what, dtype, "f16, bf16, fp8_e4m3"); \
    }                                                                             \
  }()
