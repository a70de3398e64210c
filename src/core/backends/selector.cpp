// Which MLA backend serves a layer: explicit choice or the priority walk,
// with the seeds' refusal texts and memoized automatic choices (see
// lattn/selector.h).
#include "lattn/selector.h"

#include <cstdlib>
#include <mutex>

#include "lattn/errors.h"
#include "lattn/log.h"
#include "lattn/registry.h"

namespace lattn {
namespace {

// Memoized automatic choices of one kind. Dropped whenever the registry's
// generation moves, so an override registered later is honoured.
template <class BackendClass>
struct SelectionMemo {
  struct Entry {
    std::optional<DeviceCapability> capability;
    SelectorConfig config;  // with the explicit-choice fields cleared
    std::shared_ptr<const BackendClass> cls;
  };
  std::mutex mutex;
  uint64_t generation = 0;
  std::vector<Entry> entries;  // a handful per process: linear search is enough
};

// The memo of one kind, one per process.
template <class BackendClass>
SelectionMemo<BackendClass>& selection_memo() {
  static SelectionMemo<BackendClass> memo;
  return memo;
}

// What differs between prefill and decode selection.
template <class BackendClass>
struct SelectorTraits;

template <>
struct SelectorTraits<PrefillBackendClass> {
  static constexpr const char* kind = "prefill";
  static constexpr const char* env_var = kPrefillBackendEnvVar;
  static constexpr const char* config_field = "prefill_backend";
  static constexpr const char* config_facts = "dtype, MLA dimensions or device";
  static PrefillBackendRegistry& registry() { return mla_prefill_backend_registry(); }
  static const std::string& explicit_choice(const SelectorConfig& c) { return c.prefill_backend; }
  static std::string repr(const SelectorConfig& c) { return c.repr(); }
};

template <>
struct SelectorTraits<DecodeBackendClass> {
  static constexpr const char* kind = "decode";
  static constexpr const char* env_var = kDecodeBackendEnvVar;
  static constexpr const char* config_field = "decode_backend";
  static constexpr const char* config_facts =
      "dtype, KV-cache dtype, block size, latent dimensions, query tokens per request or device";
  static DecodeBackendRegistry& registry() { return mla_decode_backend_registry(); }
  static const std::string& explicit_choice(const SelectorConfig& c) { return c.decode_backend; }
  static std::string repr(const SelectorConfig& c) { return c.decode_repr(); }
};

// The CPU has no compute capability, whatever the caller passed.
std::optional<DeviceCapability> capability_of(const SelectorConfig& config, std::optional<DeviceCapability> given) {
  return config.device.is_cpu() ? std::nullopt : given;
}

SelectorConfig memo_key(const SelectorConfig& config) {
  SelectorConfig key = config;
  key.prefill_backend.clear();
  key.decode_backend.clear();
  return key;
}

// get_class + validate_configuration, with the seeds' ImportError rule: a
// class that cannot be resolved is reported as the reason "ImportError"
// (its message goes to *import_error). ValueError (unregistered) propagates.
template <class BackendClass>
std::shared_ptr<const BackendClass> resolve_and_validate(const std::string& name,
                                                         std::optional<DeviceCapability> capability,
                                                         const SelectorConfig& config,
                                                         std::vector<std::string>* reasons, std::string* import_error) {
  std::shared_ptr<const BackendClass> cls;
  try {
    cls = SelectorTraits<BackendClass>::registry().get_class(name);
    *reasons = cls->validate_configuration(capability, config);
  } catch (const ImportError& e) {
    *reasons = {"ImportError"};
    *import_error = e.what();
  }
  return cls;
}

template <class BackendClass>
std::shared_ptr<const BackendClass> auto_select(std::optional<DeviceCapability> capability,
                                                const SelectorConfig& config) {
  using Traits = SelectorTraits<BackendClass>;
  capability = capability_of(config, capability);
  auto& memo = selection_memo<BackendClass>();
  const SelectorConfig key = memo_key(config);
  const uint64_t generation = Traits::registry().generation();
  {
    std::lock_guard lock(memo.mutex);
    if (memo.generation != generation) {
      memo.entries.clear();
      memo.generation = generation;
    }
    for (const auto& e : memo.entries) {
      if (e.capability == capability && e.config == key) return e.cls;
    }
  }

  // Validation runs user code (plug-ins): not under the memo lock.
  std::string reasons_str;
  for (const std::string& name : mla_backend_priorities(config.device, capability)) {
    std::vector<std::string> reasons;
    std::string import_error;
    auto cls = resolve_and_validate<BackendClass>(name, capability, config, &reasons, &import_error);
    if (!import_error.empty()) log_once(LogLevel::warning, import_error);
    if (reasons.empty()) {
      if (!capability) {
        info_once(std::string("Device capability not available, using ") + name + " MLA " + Traits::kind + " backend.");
      } else {
        info_once("Using " + name + " MLA " + Traits::kind + " backend.");
      }
      std::lock_guard lock(memo.mutex);
      if (memo.generation == generation && Traits::registry().generation() == generation) {
        memo.entries.push_back({capability, key, cls});
      }
      return cls;
    }
    if (!reasons_str.empty()) reasons_str += ", ";
    reasons_str += name + ": [";
    for (size_t i = 0; i < reasons.size(); ++i) reasons_str += (i ? ", " : "") + reasons[i];
    reasons_str += "]";
  }
  const std::string message = std::string("No valid MLA ") + Traits::kind + " backend found with " +
                              Traits::repr(config) + ". Reasons: {" + reasons_str + "}.";
  debug_once(message);
  throw ValueError(message + " Change the " + Traits::config_facts +
                   " to values one of these backends supports, or register a backend that supports them "
                   "(see docs/backends.md).");
}

template <class BackendClass>
std::shared_ptr<const BackendClass> select(std::optional<DeviceCapability> capability, const SelectorConfig& config) {
  using Traits = SelectorTraits<BackendClass>;
  capability = capability_of(config, capability);
  std::string requested = Traits::explicit_choice(config);
  bool from_env = false;
  if (requested.empty()) {
    if (const char* env = std::getenv(Traits::env_var); env && *env) {
      requested = env;
      from_env = true;
    }
  }
  if (requested.empty()) return auto_select<BackendClass>(capability, config);

  std::string name;
  try {
    name = Traits::registry().canonical_name(requested);
  } catch (const ValueError& e) {
    if (!from_env) throw;
    throw ValueError(std::string(e.what()) + ". Set " + Traits::env_var +
                     " to one of them, or unset it to let lattn choose.");
  }

  std::vector<std::string> reasons;
  std::string import_error;
  auto cls = resolve_and_validate<BackendClass>(name, capability, config, &reasons, &import_error);
  if (!reasons.empty()) {
    std::string message = std::string("Selected MLA ") + Traits::kind + " backend " + name +
                          " is not valid for this configuration. Reason: " + python_list_repr(reasons) + ". ";
    if (!import_error.empty()) {
      message += import_error;
    } else {
      message += std::string("Select another MLA ") + Traits::kind + " backend, or " +
                 (from_env ? std::string("unset ") + Traits::env_var
                           : std::string("leave the ") + Traits::config_field + " setting empty") +
                 " to let lattn choose.";
    }
    throw ValueError(message);
  }
  info_once("Using " + name + " MLA " + Traits::kind + " backend.");
  return cls;
}

template <class BackendClass>
std::vector<BackendVerdict> explain(std::optional<DeviceCapability> capability, const SelectorConfig& config) {
  auto& registry = SelectorTraits<BackendClass>::registry();
  capability = capability_of(config, capability);
  std::vector<BackendVerdict> verdicts;
  for (const std::string& name : registry.names()) {
    BackendVerdict v;
    v.name = name;
    try {
      v.path = registry.get_path(name);
    } catch (const ValueError& e) {
      v.reasons = {"not registered"};
      v.error = e.what();
      verdicts.push_back(std::move(v));
      continue;
    }
    resolve_and_validate<BackendClass>(name, capability, config, &v.reasons, &v.error);
    verdicts.push_back(std::move(v));
  }
  return verdicts;
}

template <class BackendClass>
void clear_memo() {
  auto& m = selection_memo<BackendClass>();
  std::lock_guard lock(m.mutex);
  m.entries.clear();
}

}  // namespace

std::optional<DeviceCapability> selector_device_capability(const SelectorConfig& config) {
  if (config.device.is_cpu()) return std::nullopt;
  return device_capability(config.device.index);
}

std::vector<std::string> mla_backend_priorities(Device device, std::optional<DeviceCapability> capability) {
  if (device.is_cpu()) return {"cpu", "reference"};
  if (capability && capability->major == 9) return {"hopper", "cuda", "reference"};
  return {"cuda", "reference"};
}

std::shared_ptr<const PrefillBackendClass> get_mla_prefill_backend(const SelectorConfig& config) {
  return select<PrefillBackendClass>(selector_device_capability(config), config);
}

std::shared_ptr<const PrefillBackendClass> get_mla_prefill_backend(std::optional<DeviceCapability> capability,
                                                                   const SelectorConfig& config) {
  return select<PrefillBackendClass>(capability, config);
}

std::shared_ptr<const DecodeBackendClass> get_mla_decode_backend(const SelectorConfig& config) {
  return select<DecodeBackendClass>(selector_device_capability(config), config);
}

std::shared_ptr<const DecodeBackendClass> get_mla_decode_backend(std::optional<DeviceCapability> capability,
                                                                 const SelectorConfig& config) {
  return select<DecodeBackendClass>(capability, config);
}

std::shared_ptr<const PrefillBackendClass> auto_select_mla_prefill_backend(std::optional<DeviceCapability> capability,
                                                                           const SelectorConfig& config) {
  return auto_select<PrefillBackendClass>(capability, config);
}

std::shared_ptr<const DecodeBackendClass> auto_select_mla_decode_backend(std::optional<DeviceCapability> capability,
                                                                         const SelectorConfig& config) {
  return auto_select<DecodeBackendClass>(capability, config);
}

void clear_mla_backend_selection_cache() {
  clear_memo<PrefillBackendClass>();
  clear_memo<DecodeBackendClass>();
}

std::vector<BackendVerdict> explain_mla_prefill_backends(std::optional<DeviceCapability> capability,
                                                         const SelectorConfig& config) {
  return explain<PrefillBackendClass>(capability, config);
}

std::vector<BackendVerdict> explain_mla_decode_backends(std::optional<DeviceCapability> capability,
                                                        const SelectorConfig& config) {
  return explain<DecodeBackendClass>(capability, config);
}

}  // namespace lattn
