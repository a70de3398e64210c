// src/core/backends/builtin_backends.h — the table built-in backends register into at
// library load (RegisterPrefillBackend / RegisterDecodeBackend), read by the
// registry (internal).
#pragma once

#include <memory>
#include <vector>

#include "lattn/backend.h"

namespace lattn::detail {

// In registration order. Function-local statics: safe to use from other
// translation units' static initializers.
std::vector<std::shared_ptr<const PrefillBackendClass>>& builtin_prefill_classes();
std::vector<std::shared_ptr<const DecodeBackendClass>>& builtin_decode_classes();

}  // namespace lattn::detail
