// Host staging of device views (see core/ops/host_staging.h).
#include "core/ops/host_staging.h"

#include "core/ops/device_ops.h"
#include "lattn/errors.h"

namespace lattn::detail {

HostStaged::HostStaged(const Tensor& t, bool copy_in) : device_view_(t), host_(t) {
  if (!t.defined() || t.device().is_cpu()) return;
  int64_t last = 0;  // offset of the last element, in elements
  for (int d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) return;  // an empty view covers no bytes; nothing to stage
    if (t.stride(d) < 0) throw ValueError("HostStaged: negative strides are not supported: " + t.describe());
    last += (t.size(d) - 1) * t.stride(d);
  }
  span_bytes_ = size_t(last + 1) * size_t(t.element_size());
  storage_ = Buffer(span_bytes_, Device::cpu());
  if (copy_in)
    device_ops(t.device()).memcpy(storage_.data(), Device::cpu(), t.data(), t.device(), span_bytes_, nullptr);
  host_ = Tensor(storage_.data(), t.dtype(), t.shape(), t.strides(), Device::cpu());
}

void HostStaged::copy_back() const {
  if (span_bytes_ == 0) return;
  device_ops(device_view_.device())
      .memcpy(device_view_.data(), device_view_.device(), storage_.data(), Device::cpu(), span_bytes_, nullptr);
}

HostStagedCache::HostStagedCache(const LatentCache& cache) : data_(cache.data, true), host_(cache) {
  host_.data = data_.host();
}

}  // namespace lattn::detail
