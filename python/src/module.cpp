// The extension module lattn._lattn. The package lattn (python/lattn/) re-exports it.
#include "bind.h"

PYBIND11_MODULE(_lattn, m) {
  m.doc() = "lattn: Multi-head Latent Attention (MLA) kernels, zero-copy through DLPack";
  lattn::python::bind_errors(m);
  lattn::python::bind_info(m);
  lattn::python::bind_tensor(m);
  lattn::python::bind_config(m);
  lattn::python::bind_prefill_metadata(m);
  lattn::python::bind_metadata(m);
  lattn::python::bind_dcp(m);
  lattn::python::bind_cache_ops(m);
  lattn::python::bind_attention(m);
  lattn::python::bind_sparse(m);
  lattn::python::bind_functional(m);
  lattn::python::bind_backends(m);
  lattn::python::bind_registry(m);
}
