// Python values to lattn values (see convert.h).
#include "convert.h"

#include <string>

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

std::vector<int64_t> shape_arg(py::handle obj) {
  if (py::isinstance<py::int_>(obj)) return {obj.cast<int64_t>()};
  std::vector<int64_t> shape;
  for (py::handle v : obj) shape.push_back(v.cast<int64_t>());
  return shape;
}

py::tuple to_tuple(std::span<const int64_t> values) {
  py::tuple t(values.size());
  for (size_t i = 0; i < values.size(); ++i) t[i] = py::int_(values[i]);
  return t;
}

}  // namespace lattn::python
