// Grow-only scratch slots (see core/attention/workspace.h).
#include "core/attention/workspace.h"

#include <algorithm>

namespace lattn::detail {

Tensor Workspace::get(WorkspaceSlot slot, std::initializer_list<int64_t> shape, DType dtype) {
  size_t bytes = size_t(dtype_size(dtype));
  for (int64_t s : shape) bytes *= size_t(s);
  Buffer& buffer = buffers_[size_t(slot)];
  if (buffer.size() < bytes || buffer.data() == nullptr) buffer = Buffer(std::max<size_t>(bytes, 64), device_);
  return Tensor(buffer.data(), dtype, shape, device_);
}

size_t Workspace::bytes_held() const {
  size_t total = 0;
  for (const Buffer& b : buffers_) total += b.size();
  return total;
}

}  // namespace lattn::detail
