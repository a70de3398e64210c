// DLPack arrays in and out of the bindings (see arrays.h).
#include "arrays.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <unordered_set>

#include <dlpack/dlpack.h>

#include "convert.h"
#include "dlpack_versioned.h"

#include "lattn/dlpack_interop.h"
#include "lattn/errors.h"

namespace lattn::python {
namespace {

// DLPack stream numbering for CUDA (Python array API): 1 = the legacy
// default stream, 2 = the per-thread default stream, any other value = a
// cudaStream_t. 0 is not allowed, so the legacy default (nullptr) becomes 1.
py::int_ dlpack_stream_number(Stream stream) {
  return py::int_(stream == nullptr ? intptr_t(1) : reinterpret_cast<intptr_t>(stream));
}

// (device_type, device_id) of obj from __dlpack_device__, or CPU when the
// producer does not say (older producers).
std::pair<int, int> dlpack_device_of(py::handle obj) {
  if (!py::hasattr(obj, "__dlpack_device__")) return {kDLCPU, 0};
  py::object d = obj.attr("__dlpack_device__")();
  if (py::isinstance<py::tuple>(d) && py::len(d) == 2) {
    try {
      return {d[py::int_(0)].cast<int>(), d[py::int_(1)].cast<int>()};
    } catch (const py::cast_error&) {
      // not two ints: the TypeError below
    }
  }
  throw py::type_error(py::str(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).cast<std::string>() +
                       ".__dlpack_device__() must return a (device_type, device_id) pair of ints");
}

py::object loaded_module(const char* name) {
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains(name)) return py::none();
  return modules[name];
}

bool is_instance_of(py::handle obj, const char* module, const char* type) {
  py::object mod = loaded_module(module);
  if (mod.is_none() || !py::hasattr(mod, type)) return false;
  return py::isinstance(obj, mod.attr(type));
}

bool numpy_can_hold(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::i32 || dtype == DType::i64 || dtype == DType::u8;
}

// "float32", "bfloat16", ...: the name NumPy and PyTorch share (dtype_torch_name
// without its "torch." prefix).
const char* framework_dtype_name(DType dtype) { return dtype_torch_name(dtype) + std::strlen("torch."); }

py::object torch_dtype(py::handle torch, DType dtype) { return torch.attr(framework_dtype_name(dtype)); }

// NumPy 1.x refuses to export read-only arrays through DLPack ("signalling
// readonly is unsupported"); such arrays (np.broadcast_to, np.from_dlpack
// results, memory-mapped files) are viewed through the buffer protocol.
PyTensor import_read_only_numpy(py::handle obj, const char* op, const char* arg) {
  const py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request();
  DType dtype;
  const std::string& f = info.format;
  if (f == "f")
    dtype = DType::f32;
  else if (f == "e")
    dtype = DType::f16;
  else if ((f == "i" || f == "l") && info.itemsize == 4)
    dtype = DType::i32;
  else if ((f == "l" || f == "q") && info.itemsize == 8)
    dtype = DType::i64;
  else if (f == "B")
    dtype = DType::u8;
  else {
    throw ValueError(std::string(op) + ": argument '" + arg + "': unsupported NumPy buffer format '" + f +
                     "'; expected float32, float16, int32, int64 or uint8");
  }
  std::vector<int64_t> shape(info.shape.begin(), info.shape.end()), strides;
  for (py::ssize_t s : info.strides) {
    if (s % info.itemsize != 0) {
      throw ValueError(std::string(op) + ": argument '" + arg + "' has a stride of " + std::to_string(s) +
                       " bytes, not a multiple of its element size");
    }
    strides.push_back(s / info.itemsize);
  }
  Tensor view(info.ptr, dtype, std::span<const int64_t>(shape), std::span<const int64_t>(strides), Device::cpu());
  return PyTensor{view, keep_python_object(py::reinterpret_borrow<py::object>(obj)), true};
}

// obj.__dlpack__(...), asking for a versioned (DLPack 1.0) capsule first:
// only that one can say the memory is read-only. Producers that predate
// max_version (NumPy 1.x, older PyTorch) raise TypeError for the keyword;
// they are asked the 0.6 way, and their type is remembered so later calls
// skip the failing attempt.
py::object call_dlpack(py::handle obj, bool pass_stream, Stream stream) {
  // Guarded by the GIL; each type is kept alive (one reference, never
  // dropped) so its address is never reused by another type.
  static std::unordered_set<PyTypeObject*> unversioned;
  py::dict kwargs;
  if (pass_stream) kwargs["stream"] = dlpack_stream_number(stream);
  py::object method = obj.attr("__dlpack__");
  PyTypeObject* type = Py_TYPE(obj.ptr());
  if (!unversioned.contains(type)) {
    kwargs["max_version"] = py::make_tuple(kDLPackMajor, 0);
    try {
      return method(**kwargs);
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError)) throw;
    }
    Py_INCREF(reinterpret_cast<PyObject*>(type));
    unversioned.insert(type);
    PyDict_DelItemString(kwargs.ptr(), "max_version");
  }
  return method(**kwargs);
}

}  // namespace

std::string type_name(py::handle obj) {
  py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
  return py::str(type.attr("__module__")).cast<std::string>() + "." +
         py::str(type.attr("__qualname__")).cast<std::string>();
}

std::shared_ptr<void> keep_python_object(py::object obj) {
  PyObject* p = obj.release().ptr();
  return std::shared_ptr<void>(p, [](void* q) {
    if (!Py_IsInitialized()) return;  // interpreter gone: nothing left to release
    py::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(q));
  });
}

PyTensor import_array(py::handle obj, const char* op, const char* arg, Stream stream, bool has_stream) {
  if (py::isinstance<PyTensor>(obj)) return obj.cast<PyTensor>();
  if (!py::hasattr(obj, "__dlpack__")) {
    throw py::type_error(std::string(op) + ": argument '" + arg +
                         "' must be a DLPack array (NumPy, PyTorch, CuPy, lattn.Tensor, ...), got " + type_name(obj));
  }
  if (is_instance_of(obj, "numpy", "ndarray") && !obj.attr("flags").attr("writeable").cast<bool>()) {
    return import_read_only_numpy(obj, op, arg);
  }
  const auto [device_type, device_id] = dlpack_device_of(obj);
  py::object capsule = call_dlpack(obj, device_type == kDLCUDA && has_stream, stream);
  PyObject* c = capsule.ptr();
  const std::string where = std::string(op) + ": argument '" + arg + "': ";
  if (PyCapsule_IsValid(c, "dltensor_versioned")) {
    auto* managed = static_cast<DLManagedTensorVersioned1*>(PyCapsule_GetPointer(c, "dltensor_versioned"));
    // From here the export is ours to free (DLPack: rename the capsule "used_dltensor_versioned").
    PyCapsule_SetName(c, "used_dltensor_versioned");
    std::shared_ptr<void> owner(managed, [](void* p) {
      auto* m = static_cast<DLManagedTensorVersioned1*>(p);
      if (m->deleter) m->deleter(m);
    });
    if (managed->version.major != kDLPackMajor) {
      throw ValueError(where + type_name(obj) + ".__dlpack__(max_version=(1, 0)) returned DLPack " +
                       std::to_string(managed->version.major) + "." + std::to_string(managed->version.minor) +
                       "; lattn reads DLPack 1.x (and 0.6 without max_version)");
    }
    try {
      return PyTensor{from_dlpack(managed->dl_tensor), std::move(owner), (managed->flags & kDLPackFlagReadOnly) != 0};
    } catch (const ValueError& e) {
      throw ValueError(where + e.what());
    }
  }
  if (!PyCapsule_IsValid(c, "dltensor")) {
    throw py::type_error(where + type_name(obj) +
                         ".__dlpack__() did not return a 'dltensor' or 'dltensor_versioned' capsule");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
  // From here the export is ours to free (DLPack: rename the capsule "used_dltensor").
  PyCapsule_SetName(c, "used_dltensor");
  std::shared_ptr<void> owner(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter) m->deleter(m);
  });
  try {
    return PyTensor{from_dlpack(managed->dl_tensor), std::move(owner)};
  } catch (const ValueError& e) {
    throw ValueError(where + e.what());
  }
}

ArrayArgs::ArrayArgs(const char* op, py::object stream) : op_(op) {
  if (!stream.is_none()) {
    stream_resolved_ = true;
    // An int (cudaStream_t as an integer); anything else is TypeError naming 'stream'.
    stream_ = reinterpret_cast<Stream>(
        static_cast<intptr_t>(int_arg(stream, op, "stream", 0, std::numeric_limits<int64_t>::max())));
  }
}

Stream ArrayArgs::resolve_stream_for(py::handle obj, int device_index) {
  if (is_instance_of(obj, "torch", "Tensor")) {
    py::object torch = loaded_module("torch");
    py::object s = torch.attr("cuda").attr("current_stream")(device_index);
    return reinterpret_cast<Stream>(s.attr("cuda_stream").cast<intptr_t>());
  }
  py::object cupy = loaded_module("cupy");
  if (!cupy.is_none() && type_name(obj).rfind("cupy", 0) == 0) {
    return reinterpret_cast<Stream>(cupy.attr("cuda").attr("get_current_stream")().attr("ptr").cast<intptr_t>());
  }
  return nullptr;  // other producers: the legacy default stream
}

Tensor ArrayArgs::get(py::handle obj, const char* arg) {
  PyTensor t = get_with_owner(obj, arg);
  keep_alive_.push_back(std::move(t.owner));
  return t.view;
}

void ArrayArgs::note(py::handle obj) {
  if (stream_resolved_ || obj.is_none() || py::isinstance<PyTensor>(obj) || !py::hasattr(obj, "__dlpack__")) return;
  const auto [device_type, device_id] = dlpack_device_of(obj);
  if (device_type == kDLCUDA) {
    stream_ = resolve_stream_for(obj, device_id);
    stream_resolved_ = true;
  }
}

PyTensor ArrayArgs::get_with_owner(py::handle obj, const char* arg) {
  if (obj.is_none()) {
    throw py::type_error(std::string(op_) + ": argument '" + arg + "' must be an array, got None");
  }
  note(obj);
  return import_array(obj, op_, arg, stream_, stream_resolved_);
}

Tensor ArrayArgs::get_optional(py::handle obj, const char* arg) {
  if (obj.is_none()) return Tensor();
  return get(obj, arg);
}

void throw_read_only(const char* op, const char* arg) {
  throw ValueError(std::string(op) + ": argument '" + arg +
                   "' is read-only memory (e.g. a NumPy array with flags.writeable == False, or one over a bytes "
                   "object); lattn writes to it: pass a writable array");
}

Tensor ArrayArgs::get_writable(py::handle obj, const char* arg) {
  PyTensor t = get_with_owner(obj, arg);
  if (t.read_only) throw_read_only(op_, arg);
  keep_alive_.push_back(std::move(t.owner));
  return t.view;
}

Tensor ArrayArgs::get_writable_optional(py::handle obj, const char* arg) {
  if (obj.is_none()) return Tensor();
  return get_writable(obj, arg);
}

py::capsule export_capsule(const PyTensor& t) {
  DLManagedTensor* managed = to_dlpack(t.view, t.owner);
  PyObject* capsule = PyCapsule_New(managed, "dltensor", [](PyObject* self) {
    if (PyCapsule_IsValid(self, "used_dltensor")) return;  // a consumer took it
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(self, "dltensor"));
    if (m != nullptr && m->deleter) m->deleter(m);
    if (m == nullptr) PyErr_WriteUnraisable(self);
    PyErr_Restore(type, value, traceback);
  });
  if (capsule == nullptr) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

py::object empty_like_framework(py::handle like, std::vector<int64_t> shape, DType dtype, Device device) {
  py::tuple py_shape(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) py_shape[i] = py::int_(shape[i]);
  if (is_instance_of(like, "torch", "Tensor")) {
    py::object torch = loaded_module("torch");
    return torch.attr("empty")(py_shape, py::arg("dtype") = torch_dtype(torch, dtype),
                               py::arg("device") = like.attr("device"));
  }
  if (device.is_cpu() && numpy_can_hold(dtype) && is_instance_of(like, "numpy", "ndarray")) {
    py::object numpy = loaded_module("numpy");
    return numpy.attr("empty")(py_shape, py::arg("dtype") = framework_dtype_name(dtype));
  }
  auto storage = std::make_shared<OwnedTensor>(OwnedTensor::empty(shape, dtype, device));
  return py::cast(PyTensor{storage->tensor(), storage});
}

py::object as_framework_like(py::handle like, PyTensor t) {
  const DType dtype = t.view.dtype();
  py::object obj = py::cast(std::move(t));
  if (is_instance_of(like, "torch", "Tensor")) {
    py::object torch = loaded_module("torch");
    py::object result = torch.attr("from_dlpack")(obj);
    // DLPack 0.6 has no fp8 code: lattn exports fp8 as uint8; restore the type.
    if (dtype == DType::fp8_e4m3) result = result.attr("view")(torch_dtype(torch, dtype));
    return result;
  }
  if (is_instance_of(like, "numpy", "ndarray") && numpy_can_hold(dtype) &&
      obj.cast<const PyTensor&>().view.device().is_cpu()) {
    // asarray (buffer protocol, zero-copy): NumPy 1.x's from_dlpack gives read-only arrays.
    return loaded_module("numpy").attr("asarray")(obj);
  }
  return obj;
}

}  // namespace lattn::python
