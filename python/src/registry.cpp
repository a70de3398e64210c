// The backend registries (named members, overrides, plug-ins) and the
// selector (lattn/registry.h, lattn/selector.h).
#include <optional>
#include <string>

#include "backends.h"
#include "bind.h"
#include "convert.h"
#include "lattn/registry.h"
#include "lattn/selector.h"

namespace lattn::python {
namespace {

// The `capability` argument of the selector functions: "device" (the
// default) asks the device of config.device; None is the CPU; else a
// DeviceCapability.
constexpr const char* kFromDevice = "device";

bool from_device(py::handle capability) {
  return py::isinstance<py::str>(capability) && capability.cast<std::string>() == kFromDevice;
}

std::optional<DeviceCapability> capability_arg(py::handle capability, const SelectorConfig& config) {
  if (from_device(capability)) return selector_device_capability(config);
  if (capability.is_none()) return std::nullopt;
  return class_arg<DeviceCapability>(capability, "selector", "capability", "DeviceCapability (or None, or 'device')");
}

template <class Registry, class PyClass>
void bind_registry(py::module_& m, const char* name, const char* kind) {
  py::class_<Registry>(m, name,
                       (std::string("The named MLA ") + kind +
                        " backends: reference, cpu, cuda, hopper, other built-ins, CUSTOM. A member's path "
                        "is 'builtin:NAME', a plug-in 'path/to/libx.so:symbol', or 'object:NAME'.")
                           .c_str())
      .def("names", &Registry::names, "Member names in order.")
      .def("canonical_name", &Registry::canonical_name, py::arg("name"))
      .def("get_path", &Registry::get_path, py::arg("name"),
           "The member's path (its override, else its default); ValueError when it has none (CUSTOM).")
      .def(
          "get_class", [](const Registry& r, const std::string& n) { return PyClass{r.get_class(n)}; }, py::arg("name"),
          "Resolves the member's path to its class (ImportError when it cannot).")
      .def("is_overridden", &Registry::is_overridden, py::arg("name"))
      .def("clear_override", &Registry::clear_override, py::arg("name"))
      .def(
          "register", [](Registry& r, const std::string& n, const std::string& path) { r.register_backend(n, path); },
          py::arg("name"), py::arg("path"),
          "Overrides a member's path, e.g. register('CUSTOM', 'build/libmy_backend.so:my_plugin'). Resolved lazily.")
      .def_property_readonly("generation", &Registry::generation);
}

}  // namespace

void bind_registry(py::module_& m) {
  bind_registry<PrefillBackendRegistry, PyPrefillBackendClass>(m, "PrefillBackendRegistry", "prefill");
  bind_registry<DecodeBackendRegistry, PyDecodeBackendClass>(m, "DecodeBackendRegistry", "decode");
  m.def("mla_prefill_backend_registry", &mla_prefill_backend_registry, py::return_value_policy::reference);
  m.def("mla_decode_backend_registry", &mla_decode_backend_registry, py::return_value_policy::reference);

  m.def(
      "prefill_backends", [] { return mla_prefill_backend_registry().names(); }, "Prefill registry member names.");
  m.def(
      "decode_backends", [] { return mla_decode_backend_registry().names(); }, "Decode registry member names.");
  m.def(
      "prefill_backend_class",
      [](const std::string& n) { return PyPrefillBackendClass{mla_prefill_backend_registry().get_class(n)}; },
      py::arg("name"));
  m.def(
      "decode_backend_class",
      [](const std::string& n) { return PyDecodeBackendClass{mla_decode_backend_registry().get_class(n)}; },
      py::arg("name"));
  m.def(
      "register_mla_prefill_backend",
      [](const std::string& backend, const std::string& path) { register_mla_prefill_backend(backend, path); },
      py::arg("backend"), py::arg("path"),
      "The seeds' register_mla_prefill_backend, direct form: backend is a member name (CUSTOM to add one), "
      "path a plug-in 'path/to/libx.so:symbol' or 'builtin:NAME'.");
  m.def(
      "register_mla_decode_backend",
      [](const std::string& backend, const std::string& path) { register_mla_decode_backend(backend, path); },
      py::arg("backend"), py::arg("path"));

  py::class_<BackendVerdict>(m, "BackendVerdict", "One registry member's verdict for a configuration.")
      .def_readonly("name", &BackendVerdict::name)
      .def_readonly("path", &BackendVerdict::path)
      .def_readonly("reasons", &BackendVerdict::reasons)
      .def_readonly("error", &BackendVerdict::error)
      .def_property_readonly("valid", &BackendVerdict::valid)
      .def("__repr__", [](const BackendVerdict& v) {
        return "BackendVerdict(name='" + v.name + "', reasons=" + python_list_repr(v.reasons) + ")";
      });

  const char* cap_doc = "capability: 'device' (default: config.device's), None (the CPU) or a DeviceCapability.";
  m.def(
      "get_mla_prefill_backend",
      [](const SelectorConfig& config, py::handle capability) {
        if (from_device(capability)) return PyPrefillBackendClass{get_mla_prefill_backend(config)};
        return PyPrefillBackendClass{get_mla_prefill_backend(capability_arg(capability, config), config)};
      },
      py::arg("config"), py::arg("capability") = kFromDevice,
      (std::string("The selected prefill backend class (explicit choice, else the priority list). ") + cap_doc)
          .c_str());
  m.def(
      "get_mla_decode_backend",
      [](const SelectorConfig& config, py::handle capability) {
        if (from_device(capability)) return PyDecodeBackendClass{get_mla_decode_backend(config)};
        return PyDecodeBackendClass{get_mla_decode_backend(capability_arg(capability, config), config)};
      },
      py::arg("config"), py::arg("capability") = kFromDevice, cap_doc);
  m.def(
      "explain_mla_prefill_backends",
      [](const SelectorConfig& config, py::handle capability) {
        return explain_mla_prefill_backends(capability_arg(capability, config), config);
      },
      py::arg("config"), py::arg("capability") = kFromDevice,
      "Every prefill member's verdict (reasons, [] = valid), in registry order.");
  m.def(
      "explain_mla_decode_backends",
      [](const SelectorConfig& config, py::handle capability) {
        return explain_mla_decode_backends(capability_arg(capability, config), config);
      },
      py::arg("config"), py::arg("capability") = kFromDevice);
  m.def(
      "mla_backend_priorities",
      [](py::handle device, std::optional<DeviceCapability> capability) {
        return mla_backend_priorities(device_arg(device), capability);
      },
      py::arg("device"), py::arg("capability") = py::none(), "The automatic priority list for a device, best first.");
  m.def("clear_mla_backend_selection_cache", &clear_mla_backend_selection_cache);
}

}  // namespace lattn::python
