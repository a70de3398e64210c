// python/src/arrays.h — DLPack arrays in and out of the bindings.
//
// In: any object with __dlpack__ (NumPy, PyTorch, CuPy, JAX, lattn.Tensor)
// becomes a lattn::Tensor VIEW of the same memory (no copy). ArrayArgs
// collects one call's arrays and keeps each producer's export alive until the
// call returns. For CUDA arrays it settles the stream the call runs on: an
// explicit `stream=` argument, else the caller's current stream of the
// array's framework (torch.cuda.current_stream(device).cuda_stream, CuPy's
// current stream), and passes that stream to __dlpack__(stream=...) so the
// producer orders its pending work before ours (DLPack's stream contract).
//
// Out: PyTensor (Python: lattn.Tensor) is a lattn view plus whatever owns its
// memory; it implements __dlpack__/__dlpack_device__, so np.from_dlpack,
// torch.from_dlpack and the like take it without copying.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn::python {

namespace py = pybind11;

// A lattn view and the owner of its memory (an OwnedTensor, a producer's
// DLManagedTensor, or a Python object), shared by every export of it.
// read_only: the producer said the memory must not be written (NumPy's
// writeable=False, a read-only buffer); ops refuse it where they write.
struct PyTensor {
  Tensor view;
  std::shared_ptr<void> owner;
  bool read_only = false;
};

// Keeps a Python object alive from C++ without holding the GIL: the last
// release takes the GIL to drop the reference (DLPack deleters may run on
// any thread).
std::shared_ptr<void> keep_python_object(py::object obj);

// The arrays of one binding call (see the file comment).
class ArrayArgs {
 public:
  // op: the operation's name for messages; stream: None or an int
  // (cudaStream_t as an integer; 0 = the legacy default stream).
  ArrayArgs(const char* op, py::object stream);

  // A required array argument. TypeError names arg when obj is not an array.
  Tensor get(py::handle obj, const char* arg);
  // The same, with the owner of the memory (to keep beyond this call).
  PyTensor get_with_owner(py::handle obj, const char* arg);
  // None -> an undefined Tensor.
  Tensor get_optional(py::handle obj, const char* arg);
  // An array the call writes: ValueError naming arg when its memory is
  // read-only. get_writable_optional: None -> an undefined Tensor.
  Tensor get_writable(py::handle obj, const char* arg);
  Tensor get_writable_optional(py::handle obj, const char* arg);
  // Lets an array the call does not import (a cache's source array) settle
  // the stream, as get() would; None and host arrays change nothing.
  void note(py::handle obj);
  // The stream the call runs on (nullptr on the CPU or when none was found).
  Stream stream() const { return stream_; }
  const char* op() const { return op_; }

 private:
  Stream resolve_stream_for(py::handle obj, int device_index);
  const char* op_;
  bool stream_resolved_ = false;
  Stream stream_ = nullptr;
  std::vector<std::shared_ptr<void>> keep_alive_;
};

// Imports one array as a PyTensor (a view that keeps the producer's export
// alive). stream: the consumer stream to hand to a CUDA producer.
PyTensor import_array(py::handle obj, const char* op, const char* arg, Stream stream, bool has_stream);

// ValueError "op: argument 'arg' is read-only memory ...; lattn writes to it".
[[noreturn]] void throw_read_only(const char* op, const char* arg);

// The DLPack capsule of t (named "dltensor"; freed by its destructor unless
// a consumer renamed it "used_dltensor").
py::capsule export_capsule(const PyTensor& t);

// A new array of `shape`/`dtype` on the device of `like`, made by like's
// framework when it can hold that dtype (torch.empty, numpy.empty), else a
// lattn.Tensor. Used for outputs the caller did not pass.
py::object empty_like_framework(py::handle like, std::vector<int64_t> shape, DType dtype, Device device);

// t as an object of like's framework (torch.from_dlpack / numpy.from_dlpack,
// zero-copy) when it can represent t, else as a lattn.Tensor.
py::object as_framework_like(py::handle like, PyTensor t);

// "numpy.ndarray", "torch.Tensor", ...: the qualified type name of obj.
std::string type_name(py::handle obj);

}  // namespace lattn::python
