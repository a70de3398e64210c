// python/src/bind.h — one function per part of the public API, each adding
// that part's classes and functions to the module (module.cpp calls them).
#pragma once

#include <string>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every binding file: one set of type casters (optional, vector, ...)

#include "lattn/backend.h"
#include "lattn/dcp.h"

namespace lattn::python {

namespace py = pybind11;

void bind_errors(py::module_& m);            // exception translation (errors.cpp)
void bind_info(py::module_& m);              // version, build options, dtypes, devices (info.cpp)
void bind_tensor(py::module_& m);            // lattn.Tensor, from_dlpack, empty, zeros, astype (tensor.cpp)
void bind_config(py::module_& m);            // MlaDims, MLADimensions, SelectorConfig (config.cpp)
void bind_prefill_metadata(py::module_& m);  // PrefillMetadata from arrays (prefill_metadata.cpp)
void bind_backends(py::module_& m);          // backend classes and instances (backends.cpp)
void bind_registry(py::module_& m);          // registries, plug-ins, selector (registry.cpp)
void bind_metadata(py::module_& m);          // metadata builder and views (metadata.cpp)
void bind_cache_ops(py::module_& m);         // LatentCache and the cache/attention-state ops (cache_ops.cpp)
void bind_attention(py::module_& m);         // MlaAttention (attention.cpp)
void bind_sparse(py::module_& m);            // sparse MLA, fp8_ds_mla, the indexer (sparse.cpp)
void bind_functional(py::module_& m);        // mla_decode_plan, mla_decode, mla_prefill (functional.cpp)
void bind_dcp(py::module_& m);               // communicators, DcpConfig, build_dcp_decode_metadata (dcp.cpp)

// "fp8_e4m3_static_per_tensor" -> QuantKey (config.cpp); ValueError otherwise.
QuantKey quant_key_arg(const std::string& name);
// "all_gather_reduce_scatter" (or "ag-rs"), "all_to_all" (or "all-to-all"); ValueError otherwise (dcp.cpp).
DcpCombineMethod dcp_method_arg(const std::string& name);

}  // namespace lattn::python
