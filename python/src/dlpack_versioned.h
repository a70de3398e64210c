// python/src/dlpack_versioned.h — the DLPack 1.0 ABI of a versioned capsule.
//
// Debian's libdlpack-dev is DLPack 0.6, which has no versioned struct and no
// read-only flag. Producers that implement the Python array API's
// `__dlpack__(max_version=(1, 0))` return a capsule named
// "dltensor_versioned" holding the struct below, whose `flags` may say the
// memory is read-only. DLTensor is the same struct in 0.6 and 1.x, so the
// 0.6 header's DLTensor is reused. Layout as published by the DLPack
// standard (dlpack.h 1.0, DLManagedTensorVersioned).
#pragma once

#include <cstdint>

#include <dlpack/dlpack.h>

namespace lattn::python {

// {major, minor}: a consumer accepts any minor of the major it knows.
struct DLPackVersion1 {
  uint32_t major;
  uint32_t minor;
};

struct DLManagedTensorVersioned1 {
  DLPackVersion1 version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned1* self);  // may be null
  uint64_t flags;
  DLTensor dl_tensor;
};

// Bit 0 of flags: the memory must not be written (DLPACK_FLAG_BITMASK_READ_ONLY).
constexpr uint64_t kDLPackFlagReadOnly = 1ull << 0;
// The major version this consumer reads.
constexpr uint32_t kDLPackMajor = 1;

}  // namespace lattn::python
