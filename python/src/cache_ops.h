// python/src/cache_ops.h — the Python holder of a latent cache.
#pragma once

#include <memory>

#include <pybind11/pybind11.h>

#include "lattn/cache.h"

namespace lattn::python {

namespace py = pybind11;

// A LatentCache view, the owner of its memory, and the Python array it views
// (None for lattn-owned caches): ops settle their CUDA stream from it.
struct PyLatentCache {
  LatentCache cache;
  std::shared_ptr<void> owner;
  py::object source;
};

}  // namespace lattn::python
