// src/core/backends/unavailable_backend.h — what a standard registry member resolves
// to when this build does not contain it (cuda without CUDA, hopper before
// anyone implements it): a class that is listed and explains itself, never a
// fake implementation (internal).
#pragma once

#include <memory>
#include <string>

#include "lattn/backend.h"

namespace lattn::detail {

// is_available() == false, so validate_configuration() reports
// "required dependencies not available"; create() throws
// BackendUnavailableError with a sentence saying what to do instead.
std::shared_ptr<const PrefillBackendClass> make_unavailable_prefill_class(const std::string& name);
std::shared_ptr<const DecodeBackendClass> make_unavailable_decode_class(const std::string& name);

}  // namespace lattn::detail
