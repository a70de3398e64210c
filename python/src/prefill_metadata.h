// python/src/prefill_metadata.h — a PrefillMetadata whose index arrays are
// views of caller arrays (or of an MlaMetadata's storage), kept alive with it.
#pragma once

#include <memory>
#include <vector>

#include "lattn/metadata.h"

namespace lattn::python {

struct PyPrefillMetadata {
  PrefillMetadata view;
  std::vector<std::shared_ptr<void>> keep_alive;  // owners of every array the view points at
};

}  // namespace lattn::python
