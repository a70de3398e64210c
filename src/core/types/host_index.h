// src/core/types/host_index.h — one element of a host index tensor (int32 or
// int64, any strides), for the host-side checks and loops over slot
// mappings, block tables and cumulative lengths (internal).
#pragma once

#include <cstdint>

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

}  // namespace lattn::detail
