// Backend lookup by name or automatically (see core/backend_lookup.h).
#include "core/backend_lookup.h"

#include <optional>
#include <vector>

#include "core/builtin_backends.h"
#include "lattn/device.h"
#include "lattn/errors.h"

namespace lattn::detail {
namespace {

std::optional<DeviceCapability> capability_of(Device device) {
  if (device.is_cpu()) return std::nullopt;
  return device_capability(device.index);
}

// Python's repr of a list of strings: ['a', 'b'] (the seeds' reason format).
std::string list_repr(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) s += ", ";
    s += "'" + items[i] + "'";
  }
  return s + "]";
}

template <class Class>
std::shared_ptr<const Class> lookup(const std::vector<std::shared_ptr<const Class>>& classes, const char* kind,
                                    const std::string& name, const SelectorConfig& config) {
  const auto capability = capability_of(config.device);
  if (!name.empty()) {
    std::string known;
    for (const auto& cls : classes) {
      if (cls->name() == name) {
        const auto reasons = cls->validate_configuration(capability, config);
        if (!reasons.empty()) {
          throw ValueError(std::string("Selected MLA ") + kind + " backend " + name +
                           " is not valid for this configuration. Reason: " + list_repr(reasons));
        }
        return cls;
      }
      known += (known.empty() ? "" : ", ") + cls->name();
    }
    throw ValueError(std::string("Unknown MLA ") + kind + " backend: '" + name + "'. Valid options are: " + known);
  }
  // Automatic: the oracle is chosen only when no other backend is valid.
  std::shared_ptr<const Class> fallback;
  std::string all_reasons;
  for (const auto& cls : classes) {
    const auto reasons = cls->validate_configuration(capability, config);
    if (reasons.empty()) {
      if (cls->name() != "reference") return cls;
      fallback = cls;
    } else {
      all_reasons += (all_reasons.empty() ? "" : ", ") + cls->name() + ": " + list_repr(reasons);
    }
  }
  if (fallback) return fallback;
  throw ValueError(std::string("No valid MLA ") + kind + " backend found with " + config.repr() + ". Reasons: {" +
                   all_reasons + "}.");
}

}  // namespace

std::shared_ptr<const PrefillBackendClass> lookup_prefill_backend(const std::string& name,
                                                                  const SelectorConfig& config) {
  return lookup(builtin_prefill_classes(), "prefill", name, config);
}

std::shared_ptr<const DecodeBackendClass> lookup_decode_backend(const std::string& name, const SelectorConfig& config) {
  return lookup(builtin_decode_classes(), "decode", name, config);
}

}  // namespace lattn::detail
