// python/src/backends.h — Python holders of backend classes (shared, const).
#pragma once

#include <memory>

#include "lattn/backend.h"

namespace lattn::python {

struct PyPrefillBackendClass {
  std::shared_ptr<const PrefillBackendClass> cls;
};

struct PyDecodeBackendClass {
  std::shared_ptr<const DecodeBackendClass> cls;
};

}  // namespace lattn::python
