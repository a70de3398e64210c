// Python values to lattn values (see convert.h).
#include "convert.h"

#include <cmath>
#include <limits>
#include <string>

#include "lattn/errors.h"
#include "lattn/sparse.h"

namespace lattn::python {

DType dtype_arg(py::handle obj) {
  if (py::isinstance<py::str>(obj)) {
    // The fp8_ds_mla cache format is stored as bytes (lattn/sparse.h).
    if (obj.cast<std::string>() == "fp8_ds_mla") return kFp8DsMla;
    return parse_dtype(obj.cast<std::string>());
  }
  // torch.dtype prints as "torch.bfloat16"; numpy dtypes and scalar types
  // have numpy.dtype(x).name ("float32").
  const std::string type = py::str(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).cast<std::string>();
  if (type == "<class 'torch.dtype'>") return parse_dtype(py::str(obj).cast<std::string>());
  py::dict modules = py::module_::import("sys").attr("modules");
  if (modules.contains("numpy")) {
    try {
      return parse_dtype(modules["numpy"].attr("dtype")(obj).attr("name").cast<std::string>());
    } catch (const py::error_already_set&) {
      // not something numpy.dtype understands: fall through to the message below
    }
  }
  // Anything else (an array, a number): its type, never its printout.
  throw py::type_error("dtype must be a dtype name ('bf16', 'float32', ...), a torch.dtype or a NumPy dtype, got " +
                       type_str(obj));
}

Device device_arg(py::handle obj) {
  // torch.device prints as "cuda:1" or "cpu"; strings are parsed as they are.
  if (py::isinstance<py::str>(obj) || type_str(obj) == "<class 'torch.device'>") {
    return parse_device(py::str(obj).cast<std::string>());
  }
  throw py::type_error("device must be a str ('cpu', 'cuda:0') or a torch.device, got " + type_str(obj));
}

int64_t int_arg(py::handle obj, const char* op, const char* arg, int64_t lo, int64_t hi) {
  const std::string name = std::string(op) + ": argument '" + arg + "'";
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr())) {
    throw py::type_error(name + " must be an int in " + range + ", got " +
                         py::str(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).cast<std::string>());
  }
  py::int_ value = py::reinterpret_steal<py::int_>(PyNumber_Index(obj.ptr()));
  if (!value) {
    // __index__ refused (a NumPy array of more than one element): its type, never its printout.
    PyErr_Clear();
    throw py::type_error(name + " must be an int in " + range + ", got " + type_str(obj));
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0 || v < lo || v > hi) {
    throw ValueError(name + " must be in " + range + ", got " + py::str(value).cast<std::string>());
  }
  return v;
}

std::string type_str(py::handle obj) {
  return py::str(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).cast<std::string>();
}

double float_arg(py::handle obj, const char* op, const char* arg, bool finite) {
  const std::string name = std::string(op) + ": argument '" + arg + "'";
  // Arrays have __float__ too (size-1 ones convert): refuse anything with __dlpack__ or __array__,
  // except 0-d ones (NumPy scalars such as numpy.float32 have __array_interface__ and ndim 0).
  const bool zero_dim =
      py::hasattr(obj, "ndim") && PyIndex_Check(obj.attr("ndim").ptr()) && obj.attr("ndim").cast<int64_t>() == 0;
  const bool array_like = !zero_dim && (py::hasattr(obj, "__dlpack__") || py::hasattr(obj, "__array_interface__"));
  const bool is_number = PyFloat_Check(obj.ptr()) || PyLong_Check(obj.ptr()) ||
                         (!array_like && Py_TYPE(obj.ptr())->tp_as_number != nullptr &&
                          Py_TYPE(obj.ptr())->tp_as_number->nb_float != nullptr);
  if (PyBool_Check(obj.ptr()) || !is_number) {
    throw py::type_error(name + " must be a float, got " + type_str(obj));
  }
  const double v = PyFloat_AsDouble(obj.ptr());
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw ValueError(name + " must be a float in double's range, got " + py::str(obj).cast<std::string>());
  }
  if (finite && !std::isfinite(v)) throw ValueError(name + " must be finite, got " + py::str(obj).cast<std::string>());
  return v;
}

bool bool_arg(py::handle obj, const char* op, const char* arg) {
  if (PyBool_Check(obj.ptr())) return obj.ptr() == Py_True;
  // NumPy's bool scalar: numpy.bool_ (NumPy 1), numpy.bool (NumPy 2).
  const std::string type = type_str(obj);
  if (type == "<class 'numpy.bool_'>" || type == "<class 'numpy.bool'>") return PyObject_IsTrue(obj.ptr()) == 1;
  throw py::type_error(std::string(op) + ": argument '" + arg + "' must be a bool, got " + type_str(obj));
}

std::string str_arg(py::handle obj, const char* op, const char* arg) {
  if (!py::isinstance<py::str>(obj)) {
    throw py::type_error(std::string(op) + ": argument '" + arg + "' must be a str, got " + type_str(obj));
  }
  return obj.cast<std::string>();
}

std::vector<int64_t> shape_arg(py::handle obj, const char* op) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (PyIndex_Check(obj.ptr())) return {int_arg(obj, op, "shape", 0, kMax)};
  if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj)) {
    throw py::type_error(std::string(op) + ": argument 'shape' must be an int or a sequence of ints, got " +
                         py::str(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).cast<std::string>());
  }
  std::vector<int64_t> shape;
  for (py::handle v : obj) shape.push_back(int_arg(v, op, "shape", 0, kMax));
  return shape;
}

py::tuple to_tuple(std::span<const int64_t> values) {
  py::tuple t(values.size());
  for (size_t i = 0; i < values.size(); ++i) t[i] = py::int_(values[i]);
  return t;
}

}  // namespace lattn::python
