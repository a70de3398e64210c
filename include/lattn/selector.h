// lattn/selector.h — which MLA backend serves a layer (docs/backends.md).
//
// The seeds' get_mla_prefill_backend, for prefill and for decode:
//
// 1. An explicit choice — SelectorConfig::prefill_backend (decode_backend),
//    else the environment variable LATTN_MLA_PREFILL_BACKEND
//    (LATTN_MLA_DECODE_BACKEND); empty means "no choice" — is resolved through
//    the registry and validated. A refusal throws ValueError:
//      "Selected MLA prefill backend cuda is not valid for this configuration.
//       Reason: ['compute capability none (cpu) not supported']. <what to change>"
//    (the seed's text, the reasons as a Python list repr; a class that cannot
//    be resolved gives Reason: ['ImportError'] and the import error follows).
//    An unregistered CUSTOM propagates the registry's ValueError unchanged; an
//    unknown name throws "Unknown MLA prefill backend: 'x'. Valid options are: ...".
// 2. Otherwise the members of a priority list are tried in order, and the
//    first whose validate_configuration() gives no reasons wins:
//      CUDA device, compute capability 9.x:   hopper, cuda, reference
//      any other CUDA device:                 cuda, reference
//      the CPU (no compute capability):       cpu, reference
//    `reference` comes last everywhere: it is selectable by name anywhere but
//    never auto-picked where another backend is valid. With no valid member:
//      "No valid MLA prefill backend found with MLAPrefillSelectorConfig(...).
//       Reasons: {hopper: [...], cuda: [...], reference: [...]}. <what to change>"
//    The automatic choice is memoized per (device capability, selector config)
//    until clear_mla_backend_selection_cache() or any registry change.
//
// Deviation from the seeds, on purpose: with no device capability the seeds
// return FLASH_ATTN unvalidated; lattn walks the CPU list with validation
// (the seed's design note, docs/backends.md) and logs
// "Device capability not available, using cpu MLA prefill backend.".
// Log lines (info, once per text): "Using cpu MLA prefill backend.".
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lattn/backend.h"
#include "lattn/device.h"

namespace lattn {

inline constexpr const char* kPrefillBackendEnvVar = "LATTN_MLA_PREFILL_BACKEND";
inline constexpr const char* kDecodeBackendEnvVar = "LATTN_MLA_DECODE_BACKEND";

// The compute capability the selector uses for config.device: the CUDA
// device's (lattn::device_capability), nullopt for the CPU or a CUDA device
// that does not exist in this process.
std::optional<DeviceCapability> selector_device_capability(const SelectorConfig& config);

// The automatic priority list for a device (member names, best first); the
// same for prefill and decode.
std::vector<std::string> mla_backend_priorities(Device device, std::optional<DeviceCapability> capability);

// The selected backend class; create instances with ->create(params).
// The first form queries the capability of config.device; the second takes it
// (engines that already know their device, and tests).
std::shared_ptr<const PrefillBackendClass> get_mla_prefill_backend(const SelectorConfig& config);
std::shared_ptr<const PrefillBackendClass> get_mla_prefill_backend(std::optional<DeviceCapability> capability,
                                                                   const SelectorConfig& config);
std::shared_ptr<const DecodeBackendClass> get_mla_decode_backend(const SelectorConfig& config);
std::shared_ptr<const DecodeBackendClass> get_mla_decode_backend(std::optional<DeviceCapability> capability,
                                                                 const SelectorConfig& config);

// Step 2 alone (the seeds' _auto_select_mla_prefill_backend): ignores any
// explicit choice; memoized.
std::shared_ptr<const PrefillBackendClass> auto_select_mla_prefill_backend(std::optional<DeviceCapability> capability,
                                                                           const SelectorConfig& config);
std::shared_ptr<const DecodeBackendClass> auto_select_mla_decode_backend(std::optional<DeviceCapability> capability,
                                                                         const SelectorConfig& config);

// Forgets every memoized automatic choice (prefill and decode).
void clear_mla_backend_selection_cache();

// One member's verdict for a configuration, for listings (CLI, Python).
struct BackendVerdict {
  std::string name;                  // canonical member name
  std::string path;                  // its path, "" when it has none (unregistered CUSTOM)
  std::vector<std::string> reasons;  // validate_configuration's reasons; ["ImportError"] when
                                     // unresolvable, ["not registered"] without a path
  std::string error;                 // the ImportError / ValueError text behind those two
  bool valid() const { return reasons.empty(); }
};

// Every member's verdict, in registry order (nothing is memoized or logged).
std::vector<BackendVerdict> explain_mla_prefill_backends(std::optional<DeviceCapability> capability,
                                                         const SelectorConfig& config);
std::vector<BackendVerdict> explain_mla_decode_backends(std::optional<DeviceCapability> capability,
                                                        const SelectorConfig& config);

// Python's repr of a list of str, as the seeds print reasons:
// ['a', "it's"] (single quotes unless the text holds one and no double quote).
std::string python_list_repr(const std::vector<std::string>& items);

}  // namespace lattn
