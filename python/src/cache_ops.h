// python/src/cache_ops.h — the Python holder of a latent cache.
#pragma once

#include <memory>

#include <pybind11/pybind11.h>

#include "lattn/cache.h"
#include "lattn/sparse.h"

namespace lattn::python {

namespace py = pybind11;

// A LatentCache view, the owner of its memory, and the Python array it views
// (None for lattn-owned caches): ops settle their CUDA stream from it.
// read_only: the array's memory must not be written (ops that write refuse).
struct PyLatentCache {
  LatentCache cache;
  std::shared_ptr<void> owner;
  py::object source;
  bool read_only = false;
};

// The lightning indexer's key cache (lattn.IndexerKeyCache) and its memory's owner.
struct PyIndexerKeyCache {
  IndexerKeyCache cache;
  std::shared_ptr<void> owner;
};

// The cache argument `arg` of `op`: TypeError unless it is a lattn.LatentCache;
// with writable, ValueError when its memory is read-only.
const PyLatentCache& cache_arg(py::handle obj, const char* op, const char* arg, bool writable);

}  // namespace lattn::python
