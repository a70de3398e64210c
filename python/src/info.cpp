// Version, build options, dtypes, devices and logging.
#include <string>

#include "bind.h"
#include "convert.h"
#include "lattn/device.h"
#include "lattn/dtype.h"
#include "lattn/log.h"
#include "lattn/version.h"

namespace lattn::python {

void bind_info(py::module_& m) {
  m.def("version", &lattn::version, "The library version, e.g. '0.1.0'.");
  m.def("build_options", &lattn::build_options, "What liblattn was built with, e.g. 'cuda=off openmp=on ...'.");
  m.def("built_with_cuda", &lattn::built_with_cuda, "True when liblattn has its CUDA backends.");

  m.def(
      "dtypes",
      [] {
        py::list names;
        for (DType t : {DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3, DType::i32, DType::i64, DType::u8}) {
          names.append(dtype_name(t));
        }
        return names;
      },
      "lattn's dtype names: f32, f16, bf16, fp8_e4m3, i32, i64, u8.");
  m.def(
      "dtype_name", [](py::handle dtype) { return std::string(dtype_name(dtype_arg(dtype))); }, py::arg("dtype"),
      "The lattn name of a dtype given as a string, torch.dtype or NumPy dtype ('bfloat16' -> 'bf16').");
  m.def(
      "dtype_torch_name", [](py::handle dtype) { return std::string(dtype_torch_name(dtype_arg(dtype))); },
      py::arg("dtype"), "The PyTorch spelling the seeds' messages use ('bf16' -> 'torch.bfloat16').");

  py::class_<DeviceCapability>(m, "DeviceCapability", "A CUDA compute capability (major, minor), e.g. 9.0.")
      .def(py::init([](int major, int minor) {
             return DeviceCapability{major, minor};
           }),
           py::arg("major"), py::arg("minor"))
      .def_readonly("major", &DeviceCapability::major)
      .def_readonly("minor", &DeviceCapability::minor)
      .def("as_int", &DeviceCapability::as_int)
      .def("__eq__", [](const DeviceCapability& a, const DeviceCapability& b) { return a == b; })
      .def("__hash__", [](const DeviceCapability& c) { return c.as_int(); })
      .def("__repr__", [](const DeviceCapability& c) {
        return "DeviceCapability(major=" + std::to_string(c.major) + ", minor=" + std::to_string(c.minor) + ")";
      });

  py::class_<CudaDeviceInfo>(m, "CudaDeviceInfo", "One CUDA device as liblattn sees it.")
      .def_readonly("index", &CudaDeviceInfo::index)
      .def_readonly("name", &CudaDeviceInfo::name)
      .def_readonly("capability", &CudaDeviceInfo::capability)
      .def_readonly("sm_count", &CudaDeviceInfo::sm_count)
      .def_readonly("total_memory_bytes", &CudaDeviceInfo::total_memory_bytes)
      .def_readonly("l2_cache_bytes", &CudaDeviceInfo::l2_cache_bytes)
      .def_readonly("max_shared_memory_per_block_optin", &CudaDeviceInfo::max_shared_memory_per_block_optin)
      .def("__repr__", [](const CudaDeviceInfo& d) {
        return "CudaDeviceInfo(index=" + std::to_string(d.index) + ", name='" + d.name +
               "', capability=" + std::to_string(d.capability.major) + "." + std::to_string(d.capability.minor) +
               ", sm_count=" + std::to_string(d.sm_count) + ")";
      });

  m.def(
      "cuda_devices", [] { return query_cuda_devices().devices; },
      "The CUDA devices liblattn can use (empty without CUDA or without a GPU).");
  m.def(
      "cuda_unavailable_reason", [] { return query_cuda_devices().unavailable_reason; },
      "Why no CUDA device is usable ('' when one is), e.g. 'lattn was built without CUDA'.");
  m.def("device_capability", &lattn::device_capability, py::arg("cuda_index") = 0,
        "The compute capability of a CUDA device, or None (no such device, or a CPU-only build).");

  m.def(
      "set_log_level", [](const std::string& level) { set_log_level(parse_log_level(level)); }, py::arg("level"),
      "Sets liblattn's log level: debug, info, warning, error or off.");
}

}  // namespace lattn::python
