// src/cuda/common/workspace.h — a caller-owned, pointer-stable device workspace.
//
// Plans and split-KV partial results live here. The buffer only grows (never
// shrinks), so once it has reached the size a step needs, every pointer handed
// out for that step stays the same from step to step: a CUDA graph captured
// over kernels that use them can be replayed. Growing is refused while the
// stream is being captured (cudaMalloc is not capturable, and a new address
// would invalidate the graph), with an error that says to warm up first.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lattn/stream.h"

namespace lattn::cuda {

class Workspace {
 public:
  explicit Workspace(int device = 0) : device_(device) {}
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Makes the buffer at least `bytes` large. `stream` is checked for an
  // active capture before any reallocation. `what` names the caller in errors.
  void reserve(size_t bytes, Stream stream, const char* what);

  void* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  int device() const { return device_; }

 private:
  int device_ = 0;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Carves aligned sub-buffers out of a byte range, in order: the same sequence
// of take() calls on the same base gives the same pointers every step.
class WorkspaceCarver {
 public:
  explicit WorkspaceCarver(void* base) : base_(static_cast<char*>(base)) {}
  template <class T>
  T* take(size_t count) {
    offset_ = (offset_ + kAlign - 1) / kAlign * kAlign;
    T* p = reinterpret_cast<T*>(base_ ? base_ + offset_ : nullptr);
    offset_ += count * sizeof(T);
    return p;
  }
  size_t bytes_used() const { return offset_; }
  static constexpr size_t kAlign = 256;  // cudaMalloc's alignment, enough for any vector access

 private:
  char* base_;
  size_t offset_ = 0;
};

}  // namespace lattn::cuda
