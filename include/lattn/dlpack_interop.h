// lattn/dlpack_interop.h — zero-copy exchange with NumPy, PyTorch, CuPy...
//
// from_dlpack views a DLTensor's memory as a lattn Tensor (no copy). Strides
// may be null (compact row-major, as DLPack allows). byte_offset is applied.
// to_dlpack exports a Tensor view as a DLManagedTensor that keeps `owner`
// alive until the consumer calls its deleter.
//
// Our DLPack (Debian's libdlpack-dev, 0.6) has no fp8 type code: fp8_e4m3
// tensors are exported as uint8 and imported back with reinterpret(fp8_e4m3).
#pragma once

#include <memory>

#include <dlpack/dlpack.h>

#include "lattn/tensor.h"

namespace lattn {

// Throws ValueError for dtypes/devices lattn does not handle (names them).
Tensor from_dlpack(const DLTensor& t);

// The returned tensor's deleter releases `owner` (may be null for memory the
// caller guarantees outlives the consumer) and frees the shape/stride arrays.
DLManagedTensor* to_dlpack(const Tensor& t, std::shared_ptr<void> owner);

DLDataType to_dl_dtype(DType t);
DType from_dl_dtype(DLDataType t);  // throws ValueError

}  // namespace lattn
