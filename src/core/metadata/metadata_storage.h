// src/core/metadata/metadata_storage.h — the memory behind every MlaMetadata view
// (internal).
//
// All index arrays of one metadata live in ONE host arena (64-byte aligned
// sections), so a build makes one allocation and to_device one copy per
// section range; the device mirror has the same layout, so a device view is
// the host view with its pointer moved by (device base - host base).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lattn/tensor.h"

namespace lattn {
struct MlaMetadata;
}

namespace lattn::detail {

// Byte range [offset, offset + bytes) of the arena that to_device uploads.
struct ByteRange {
  size_t offset = 0;
  size_t bytes = 0;
};

struct MetadataStorage {
  Buffer host;                           // the arena (host)
  Buffer device;                         // its mirror, allocated by the first to_device(cuda)
  std::vector<ByteRange> upload_ranges;  // what the latest build wrote (the whole arena for normal builds)

  std::byte* host_base() const { return static_cast<std::byte*>(host.data()); }
};

// Lays sections out in an arena: each section starts at a multiple of 64 bytes
// (a cache line; also enough for int64 and vectorized device loads).
class ArenaLayout {
 public:
  // Reserves `count` elements of `element_bytes`; returns the byte offset.
  size_t add(size_t count, size_t element_bytes) {
    const size_t offset = total_;
    total_ += (count * element_bytes + 63) / 64 * 64;
    return offset;
  }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

// A contiguous host view of `shape` at byte `offset` of the storage's arena.
inline Tensor arena_view(const MetadataStorage& s, size_t offset, DType dtype, std::initializer_list<int64_t> shape) {
  return Tensor(s.host_base() + offset, dtype, shape);
}

// Points every device view of `m` at the same offsets of its storage's
// device mirror (allocated, uploaded or not: no copy), or at the host views
// when `target` is the CPU; sets m.device. The mirror must exist for a CUDA
// target.
void bind_device_views(MlaMetadata& m, Device target);

}  // namespace lattn::detail
