// src/cuda/sm90/common/tma_host.h — host side of the bulk tensor copy engine:
// builds a CUtensorMap (the descriptor tma.cuh's loads read) with the driver's
// cuTensorMapEncodeTiled, obtained through cudaGetDriverEntryPointByVersion so
// that lattn never links libcuda directly (the runtime finds the driver).
//
// Checked before encoding, each failure a lattn::ValueError naming the tensor
// and the field: rank 1..5, the global address 16-byte aligned, every stride a
// multiple of 16 bytes and below 2^40, box sizes 1..256, the box's inner row at
// most the swizzle span (128 bytes for the 128-byte swizzle) and a multiple of
// 16 bytes. An encode failure the checks did not foresee is a RuntimeError with
// the driver's code.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>
#include <string>

namespace lattn::cuda::sm90 {

struct TensorMapSpec {
  std::string name;  // for error messages: "latent cache", "Q"
  CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  int element_bytes = 2;
  const void* base = nullptr;           // global address of element (0, ..., 0)
  std::span<const cuuint64_t> dims;     // elements per dimension, innermost first
  std::span<const cuuint64_t> strides;  // bytes between consecutive indices of dims 1.. (rank - 1 values)
  std::span<const cuuint32_t> box;      // box elements per dimension, innermost first
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
};

// Validates the spec and encodes the tensor map (zero fill out of bounds,
// element strides 1, no interleave).
CUtensorMap make_tensor_map(const TensorMapSpec& spec);

}  // namespace lattn::cuda::sm90
