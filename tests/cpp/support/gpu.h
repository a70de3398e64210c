// tests/cpp/support/gpu.h — what GPU tests share: skipping cleanly (one line)
// where there is no usable GPU, and host<->device tensor helpers.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "lattn/device.h"
#include "lattn/tensor.h"

namespace lattn::test {

// Empty when a CUDA device of compute capability >= 8.0 is usable, else why not.
std::string gpu_unavailable_reason();

// A contiguous copy of a host tensor on `device` (the CPU too).
OwnedTensor to_device(const Tensor& host, Device device = Device::cuda(0));
// A contiguous host copy of any tensor (same dtype).
OwnedTensor to_host(const Tensor& t);

}  // namespace lattn::test

// First statement of every GPU test: skips with a one-line reason on machines
// without a suitable GPU (CI), so the test binary still runs there.
#define LATTN_REQUIRE_GPU()                                                    \
  do {                                                                         \
    const std::string lattn_reason_ = ::lattn::test::gpu_unavailable_reason(); \
    if (!lattn_reason_.empty()) GTEST_SKIP() << lattn_reason_;                 \
  } while (0)
