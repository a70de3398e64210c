// python/src/mla_metadata.h — the Python holder of a step's MlaMetadata.
#pragma once

#include <memory>
#include <vector>

#include <pybind11/pybind11.h>

#include "lattn/metadata.h"

namespace lattn::python {

// Shared by every Python object that views it (MlaMetadata copies share
// storage, so this one pointer keeps every array alive).
struct PyMlaMetadata {
  std::shared_ptr<MlaMetadata> md;
};

// requests: RequestSpec objects or (query_len, num_computed_tokens,
// block_table) sequences (TypeError / ValueError naming the item).
std::vector<RequestSpec> request_specs_arg(pybind11::handle requests, const char* op);

}  // namespace lattn::python
