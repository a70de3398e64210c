// python/src/convert.h — Python values to lattn values (dtypes, devices,
// shapes), accepting the spellings NumPy and PyTorch users write.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <pybind11/pybind11.h>

#include "lattn/device.h"
#include "lattn/dtype.h"

namespace lattn::python {

namespace py = pybind11;

// "bf16", "bfloat16", torch.bfloat16, numpy.float32, numpy.dtype("float16"), ...
DType dtype_arg(py::handle obj);
// "cpu", "cuda", "cuda:1", torch.device("cuda", 1).
Device device_arg(py::handle obj);
// A tuple or list of ints (or one int).
std::vector<int64_t> shape_arg(py::handle obj);
py::tuple to_tuple(std::span<const int64_t> values);

}  // namespace lattn::python
