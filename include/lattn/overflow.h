// lattn/overflow.h — size arithmetic that refuses to wrap.
//
// Every size product lattn computes from caller input (numel, bytes,
// blocks x block_size, workspace rows, the command line's token and block
// counts) goes through these: a product or sum that does not fit in 64 bits
// is refused with ValueError("<what>: <a> * <b> does not fit in 64 bits")
// instead of wrapping into a small number that a later allocation or index
// would trust.
#pragma once

#include <cstdint>
#include <string>

#include "lattn/errors.h"

namespace lattn {

// a * b, or ValueError naming `what` when the product overflows int64.
inline int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw ValueError(what + ": " + std::to_string(a) + " * " + std::to_string(b) + " does not fit in 64 bits");
  }
  return r;
}

// a + b, or ValueError naming `what` when the sum overflows int64.
inline int64_t checked_add(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    throw ValueError(what + ": " + std::to_string(a) + " + " + std::to_string(b) + " does not fit in 64 bits");
  }
  return r;
}

}  // namespace lattn
