// lattn.Tensor (a lattn view that owns or keeps alive its memory, exported
// through DLPack) and the functions that make one.
#include <string>

#include <dlpack/dlpack.h>

#include "arrays.h"
#include "bind.h"
#include "convert.h"
#include "lattn/errors.h"
#include "lattn/tensor.h"

namespace lattn::python {
namespace {

// The buffer-protocol description of a host tensor (strides in bytes).
// py::buffer_error (Python BufferError) for what the protocol cannot carry,
// saying how to get the data instead.
py::buffer_info host_buffer_info(const Tensor& t, bool read_only) {
  std::string format;
  switch (t.dtype()) {
    case DType::f32:
      format = py::format_descriptor<float>::format();
      break;
    case DType::f16:
      format = "e";
      break;
    case DType::i32:
      format = py::format_descriptor<int32_t>::format();
      break;
    case DType::i64:
      format = py::format_descriptor<int64_t>::format();
      break;
    case DType::u8:
      format = py::format_descriptor<uint8_t>::format();
      break;
    default:
      throw py::buffer_error(std::string("lattn.Tensor of dtype ") + dtype_name(t.dtype()) +
                             " has no buffer format (NumPy has no such dtype): convert it with lattn.astype(t, 'f32') "
                             "(a float32 copy), or take it zero-copy through DLPack (torch.from_dlpack(t); fp8 "
                             "travels as uint8)");
  }
  if (!t.device().is_cpu()) {
    throw py::buffer_error("lattn.Tensor on " + device_name(t.device()) +
                           " has no host buffer: copy it to the host first (e.g. torch.from_dlpack(t).cpu())");
  }
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(py::ssize_t(s) * t.element_size());
  return py::buffer_info(t.data(), t.element_size(), format, t.dim(), shape, strides, read_only);
}

// The type's bf_getbuffer slot. pybind11 (2.10) calls the def_buffer
// function from its C slot without catching: a refusal there would escape
// into CPython as a C++ exception and terminate the interpreter. This slot
// asks first, turns a refusal into BufferError, and only then lets pybind11
// fill the view.
extern "C" int tensor_getbuffer(PyObject* obj, Py_buffer* view, int flags) {
  try {
    const PyTensor& t = py::handle(obj).cast<const PyTensor&>();
    host_buffer_info(t.view, t.read_only);
  } catch (const py::buffer_error& e) {
    if (view != nullptr) view->obj = nullptr;
    PyErr_SetString(PyExc_BufferError, e.what());
    return -1;
  } catch (const std::exception& e) {
    if (view != nullptr) view->obj = nullptr;
    PyErr_SetString(PyExc_BufferError, e.what());
    return -1;
  }
  return py::detail::pybind11_getbuffer(obj, view, flags);
}

PyTensor owned(std::span<const int64_t> shape, DType dtype, Device device) {
  auto storage = std::make_shared<OwnedTensor>(OwnedTensor::empty(shape, dtype, device));
  return PyTensor{storage->tensor(), storage};
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<PyTensor> tensor(m, "Tensor", py::buffer_protocol(), R"doc(
A lattn tensor: a strided view (shape, strides in elements, dtype, device)
plus the owner of its memory. Exported zero-copy through DLPack:
numpy.from_dlpack(t), torch.from_dlpack(t). fp8_e4m3 travels as uint8
(DLPack 0.6 has no fp8 code). Host tensors of NumPy's dtypes also offer
the buffer protocol: numpy.asarray(t) is a writable view (NumPy 1.x marks
arrays it imports through DLPack read-only). Other dtypes (bf16, fp8) and
device tensors raise BufferError/TypeError there: use lattn.astype or DLPack.)doc");
  reinterpret_cast<PyTypeObject*>(tensor.ptr())->tp_as_buffer->bf_getbuffer = tensor_getbuffer;
  tensor.def_buffer([](const PyTensor& t) { return host_buffer_info(t.view, t.read_only); })
      .def(
          "__array__",
          [](py::object self, py::object dtype, py::object /*copy: NumPy 2 passes it*/) -> py::object {
            // NumPy reaches __array__ only after the buffer protocol was
            // refused (it swallows that BufferError); say why here, rather
            // than let numpy.asarray build a 0-d object array.
            const PyTensor& t = self.cast<const PyTensor&>();
            try {
              host_buffer_info(t.view, t.read_only);
            } catch (const py::buffer_error& e) {
              throw py::type_error(e.what());
            }
            py::object view = py::module_::import("builtins").attr("memoryview")(self);
            py::object a = py::module_::import("numpy").attr("asarray")(view);
            return dtype.is_none() ? a : a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def_property_readonly(
          "read_only", [](const PyTensor& t) { return t.read_only; },
          "True when the memory must not be written (a read-only source array).")
      .def_property_readonly("shape", [](const PyTensor& t) { return to_tuple(t.view.shape()); })
      .def_property_readonly(
          "strides", [](const PyTensor& t) { return to_tuple(t.view.strides()); },
          "Strides in elements (not bytes), as DLPack and PyTorch count them.")
      .def_property_readonly("dtype", [](const PyTensor& t) { return std::string(dtype_name(t.view.dtype())); })
      .def_property_readonly("device", [](const PyTensor& t) { return device_name(t.view.device()); })
      .def_property_readonly(
          "data_ptr", [](const PyTensor& t) { return reinterpret_cast<uintptr_t>(t.view.data()); },
          "Address of the first element.")
      .def_property_readonly("ndim", [](const PyTensor& t) { return t.view.dim(); })
      .def("numel", [](const PyTensor& t) { return t.view.numel(); })
      .def("is_contiguous", [](const PyTensor& t) { return t.view.is_contiguous(); })
      .def(
          "__dlpack__", [](const PyTensor& t, py::object stream) { return export_capsule(t); }, py::kw_only(),
          py::arg("stream") = py::none(),
          "DLPack (0.6) export. The stream a CUDA consumer names is not waited on: lattn's work on this memory "
          "ran on the stream its call was given (by default the caller's current stream).")
      .def("__dlpack_device__",
           [](const PyTensor& t) {
             const Device d = t.view.device();
             return py::make_tuple(int(d.is_cpu() ? kDLCPU : kDLCUDA), d.is_cpu() ? 0 : d.index);
           })
      .def(
          "numpy",
          [](py::object self) {
            // Describe the buffer first: NumPy >= 2 turns a failed buffer
            // request into a 0-d object array instead of raising.
            const PyTensor& t = self.cast<const PyTensor&>();
            host_buffer_info(t.view, t.read_only);  // BufferError saying how to get the data
            return py::module_::import("numpy").attr("asarray")(self);
          },
          "The same memory as a writable NumPy array (CPU; f32, f16, i32, i64, u8).")
      .def("__repr__", [](const PyTensor& t) { return "lattn.Tensor(" + t.view.describe() + ")"; });

  m.def(
      "from_dlpack",
      [](py::handle obj, py::object stream) {
        // The producer's export stays alive as long as this view does.
        return ArrayArgs("from_dlpack", stream).get_with_owner(obj, "x");
      },
      py::arg("x"), py::arg("stream") = py::none(), "A lattn.Tensor viewing any DLPack array's memory (no copy).");

  // The stream a call with this array would run on (tests of the stream rule).
  py::module_ testing = m.attr("_testing");
  testing.def(
      "call_stream",
      [](py::handle x, py::object stream) {
        ArrayArgs args("call_stream", stream);
        args.get(x, "x");
        return reinterpret_cast<intptr_t>(args.stream());
      },
      py::arg("x"), py::arg("stream") = py::none());

  m.def(
      "empty",
      [](py::handle shape, py::handle dtype, py::handle device) {
        return owned(shape_arg(shape, "empty"), dtype_arg(dtype), device_arg(device));
      },
      py::arg("shape"), py::arg("dtype") = "f32", py::arg("device") = "cpu",
      "A new uninitialized lattn.Tensor (host memory is 64-byte aligned).");

  m.def(
      "zeros",
      [](py::handle shape, py::handle dtype, py::handle device) {
        PyTensor t = owned(shape_arg(shape, "zeros"), dtype_arg(dtype), device_arg(device));
        fill_bytes(t.view, 0);
        return t;
      },
      py::arg("shape"), py::arg("dtype") = "f32", py::arg("device") = "cpu", "A new zero-filled lattn.Tensor.");

  m.def(
      "astype",
      [](py::handle x, py::handle dtype) {
        ArrayArgs args("astype", py::none());
        const Tensor src = args.get(x, "x");
        if (!src.device().is_cpu()) {
          throw ValueError("astype: argument 'x' must be on the cpu, got " + src.describe());
        }
        PyTensor dst = owned(src.shape(), dtype_arg(dtype), Device::cpu());
        {
          py::gil_scoped_release release;
          copy_host(src, dst.view);
        }
        return as_framework_like(x, std::move(dst));
      },
      py::arg("x"), py::arg("dtype"),
      "A converted host copy of x (round to nearest even; fp8 saturates): a NumPy/PyTorch array like x when "
      "that framework holds the dtype, else a lattn.Tensor. The way to bf16/fp8 data from NumPy and back.");
}

}  // namespace lattn::python
