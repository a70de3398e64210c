// python/src/bind.h — one function per part of the public API, each adding
// that part's classes and functions to the module (module.cpp calls them).
#pragma once

#include <pybind11/pybind11.h>

namespace lattn::python {

namespace py = pybind11;

void bind_errors(py::module_& m);   // exception translation (errors.cpp)
void bind_info(py::module_& m);     // version, build options, dtypes, devices (info.cpp)
void bind_tensor(py::module_& m);   // lattn.Tensor, from_dlpack, empty, zeros, astype (tensor.cpp)

}  // namespace lattn::python
