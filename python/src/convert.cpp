// Python values to lattn values (see convert.h).
#include "convert.h"

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
  return parse_dtype(py::str(obj).cast<std::string>());
}

Device device_arg(py::handle obj) {
  // torch.device prints as "cuda:1" or "cpu"; strings are parsed as they are.
  return parse_device(py::str(obj).cast<std::string>());
}

int64_t int_arg(py::handle obj, const char* op, const char* arg, int64_t lo, int64_t hi) {
  const std::string name = std::string(op) + ": argument '" + arg + "'";
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr())) {
    throw py::type_error(name + " must be an int in " + range + ", got " +
                         py::str(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).cast<std::string>());
  }
  py::int_ value = py::reinterpret_steal<py::int_>(PyNumber_Index(obj.ptr()));
  if (!value) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0 || v < lo || v > hi) {
    throw ValueError(name + " must be in " + range + ", got " + py::str(value).cast<std::string>());
  }
  return v;
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
