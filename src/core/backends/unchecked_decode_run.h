// src/core/backends/unchecked_decode_run.h — the decode half of "validate
// once at the public boundary" (internal).
//
// DecodeBackend::run is public: a direct caller or a plug-in's user may hand
// it anything, so a backend checks every argument there (for the `cpu`
// backend that means reading every block id of the step). MlaAttention::forward
// has already checked the same step against the metadata's host copies
// (validate_forward: shapes, dtypes, lengths, every block id against the
// cache) before it calls the backend, once per layer. A built-in backend whose
// checks cost more than a few comparisons also implements this interface;
// the layer finds it once, when it creates the backend, and calls
// run_unchecked instead of run. Plug-ins need not know it exists: a backend
// without it gets run, as before.
#pragma once

#include "lattn/backend.h"

namespace lattn::detail {

class UncheckedDecodeRun {
 public:
  // DecodeBackend::run's contract, for arguments validate_forward has
  // accepted and buffers the layer built to the backend's shapes: only what
  // validate_forward does not check is checked here.
  virtual void run_unchecked(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache,
                             const DecodeMetadata& metadata, const Tensor& out, const Tensor& lse) = 0;

 protected:
  ~UncheckedDecodeRun() = default;
};

}  // namespace lattn::detail
