// src/core/types/host_index.h — one element of a host index tensor (int32 or
// int64, any strides), for the host-side checks and loops over slot
// mappings, block tables and cumulative lengths, and the check those loops
// make per element (internal).
#pragma once

#include <cstdint>

#include "lattn/check.h"
#include "lattn/tensor.h"

namespace lattn::detail {

// t[i] of a 1-dim (or the first dim of a strided) int32/int64 host tensor.
inline int64_t index_at(const Tensor& t, int64_t i) {
  const int64_t off = i * t.stride(0);
  return t.dtype() == DType::i64 ? t.data_as<const int64_t>()[off] : t.data_as<const int32_t>()[off];
}

// t[i, j] of a 2-dim int32/int64 host tensor.
inline int64_t index_at(const Tensor& t, int64_t i, int64_t j) {
  const int64_t off = i * t.stride(0) + j * t.stride(1);
  return t.dtype() == DType::i64 ? t.data_as<const int64_t>()[off] : t.data_as<const int32_t>()[off];
}

// check_arg (lattn/check.h) for a check made once per index of a step
// (every slot, block id or request): `expected` and `got` are callables
// that return the message's two parts, called only when the check fails.
// Formatting the message for every index cost more than the check itself
// (several string allocations per block id, on every layer of every step).
template <class Expected, class Got>
inline void check_arg_lazy(bool ok, const char* op, const char* arg, const Expected& expected, const Got& got) {
  if (!ok) check_arg(false, op, arg, expected(), got());
}

}  // namespace lattn::detail
