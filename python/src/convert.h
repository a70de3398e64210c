// python/src/convert.h — Python values to lattn values (dtypes, devices,
// shapes), accepting the spellings NumPy and PyTorch users write.
#pragma once

#include <cstdint>
#include <span>
#include <string>
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
// A tuple or list of non-negative ints (or one int); errors name `op`.
std::vector<int64_t> shape_arg(py::handle obj, const char* op);
py::tuple to_tuple(std::span<const int64_t> values);

// An integer argument (int, or anything with __index__ such as numpy.int64)
// in [lo, hi]: TypeError naming `arg` for another type, ValueError naming the
// range for a value outside it (never pybind11's "Unable to cast").
int64_t int_arg(py::handle obj, const char* op, const char* arg, int64_t lo, int64_t hi);

// A float argument (float, int, or anything with __float__ such as
// numpy.float32, but not a bool, a str or an array): TypeError naming `arg`
// otherwise. finite: ValueError for NaN and +-inf.
double float_arg(py::handle obj, const char* op, const char* arg, bool finite = true);
// A bool argument (bool, or numpy.bool_): TypeError naming `arg` otherwise.
bool bool_arg(py::handle obj, const char* op, const char* arg);
// A str argument: TypeError naming `arg` otherwise.
std::string str_arg(py::handle obj, const char* op, const char* arg);
// The Python type of obj as "<class 'int'>" (for messages).
std::string type_str(py::handle obj);

// The C++ object behind a bound class argument, or TypeError
// "op: argument 'arg' must be a lattn.<python_type>, got <type>".
template <class T>
const T& class_arg(py::handle obj, const char* op, const char* arg, const char* python_type) {
  if (!py::isinstance<T>(obj)) {
    throw py::type_error(std::string(op) + ": argument '" + arg + "' must be a lattn." + python_type + ", got " +
                         py::str(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).cast<std::string>());
  }
  return obj.cast<const T&>();
}

}  // namespace lattn::python
