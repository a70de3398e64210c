// src/core/backend_lookup.h — how MlaAttention finds its backend classes
// (internal): by name, or automatically ("" = the first registered backend
// valid for the layer, `reference` only when nothing else is).
//
// Interim: this reads the built-in registration table directly; it gives way
// to lattn/registry.h + selector.h when those land.
#pragma once

#include <memory>
#include <string>

#include "lattn/backend.h"

namespace lattn::detail {

std::shared_ptr<const PrefillBackendClass> lookup_prefill_backend(const std::string& name,
                                                                  const SelectorConfig& config);
std::shared_ptr<const DecodeBackendClass> lookup_decode_backend(const std::string& name, const SelectorConfig& config);

}  // namespace lattn::detail
