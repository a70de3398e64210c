// src/core/ops/host_staging.h — host copies of device tensor views, for code
// that only runs on the host (the reference backend) (internal).
//
// A view may be strided, so the whole byte span it covers — from its first
// to its last element — is copied, and the host view keeps the same strides
// over that copy. copy_back() writes the span back: elements inside the span
// that the view does not cover travel out and back unchanged.
#pragma once

#include "lattn/cache.h"
#include "lattn/tensor.h"

namespace lattn::detail {

class HostStaged {
 public:
  HostStaged() = default;
  // Host tensors are used in place (no copy). Device tensors are copied to
  // the host when copy_in (inputs, and outputs written only in part).
  HostStaged(const Tensor& t, bool copy_in);
  const Tensor& host() const { return host_; }
  // Writes the host copy back to the device (no-op for host tensors).
  void copy_back() const;

 private:
  Tensor device_view_;
  Tensor host_;
  Buffer storage_;
  size_t span_bytes_ = 0;
};

// A host copy of a whole cache (same shape, dtype, scale).
class HostStagedCache {
 public:
  explicit HostStagedCache(const LatentCache& cache);
  const LatentCache& host() const { return host_; }

 private:
  HostStaged data_;
  LatentCache host_;
};

}  // namespace lattn::detail
