// src/cpu/host_workspace.h — grow-only, 64-byte aligned host memory a CPU
// backend instance keeps between runs (internal).
//
// Fresh pages cost a page fault each on first touch (~0.25 µs per 4 KiB), so
// packing buffers and thread scratch are kept across steps instead of being
// allocated per call. Not thread-safe: one instance runs one step at a time.
#pragma once

#include <cstddef>

#include "lattn/tensor.h"

namespace lattn::cpu {

class HostWorkspace {
 public:
  // At least `bytes` bytes, 64-byte aligned, valid until the next call.
  void* reserve(size_t bytes) {
    if (bytes > buffer_.size()) buffer_ = Buffer(bytes + bytes / 4, Device::cpu());
    return buffer_.data();
  }

 private:
  Buffer buffer_;
};

}  // namespace lattn::cpu
