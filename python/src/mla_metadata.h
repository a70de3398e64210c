// python/src/mla_metadata.h — the Python holder of a step's MlaMetadata.
#pragma once

#include <memory>

#include "lattn/metadata.h"

namespace lattn::python {

// Shared by every Python object that views it (MlaMetadata copies share
// storage, so this one pointer keeps every array alive).
struct PyMlaMetadata {
  std::shared_ptr<MlaMetadata> md;
};

}  // namespace lattn::python
