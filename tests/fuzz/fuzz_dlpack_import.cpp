// libFuzzer target: from_dlpack on random DLTensors — any ndim (negative and
// past the supported rank), shapes and strides with extreme values, null
// strides, byte offsets, every dtype code/bits/lanes and device type. The
// import either refuses with ValueError or returns a view whose element and
// byte counts fit in 64 bits (so later offset arithmetic cannot wrap).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <dlpack/dlpack.h>
#include <fuzzer/FuzzedDataProvider.h>

#include "lattn/dlpack_interop.h"
#include "lattn/errors.h"
#include "lattn/tensor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  DLTensor t{};
  t.ndim = in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(0, 8) : in.ConsumeIntegral<int32_t>();
  const size_t dims = size_t(std::clamp<int32_t>(t.ndim, 0, 8));
  std::vector<int64_t> shape(dims), strides(dims);
  for (int64_t& d : shape)
    d = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(0, 8) : in.ConsumeIntegral<int64_t>();
  for (int64_t& d : strides)
    d = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-8, 64) : in.ConsumeIntegral<int64_t>();
  // Out-of-range ndim comes with no arrays at all: the importer must not read them.
  t.shape = t.ndim >= 0 && t.ndim <= 8 ? shape.data() : nullptr;
  t.strides = (t.ndim >= 0 && t.ndim <= 8 && in.ConsumeBool()) ? strides.data() : nullptr;
  t.dtype.code = in.ConsumeIntegral<uint8_t>();
  t.dtype.bits = in.ConsumeIntegral<uint8_t>();
  t.dtype.lanes = in.ConsumeBool() ? 1 : in.ConsumeIntegral<uint16_t>();
  // Any code a C producer might store, also ones the enum does not list.
  const int32_t device_type = in.ConsumeIntegralInRange<int32_t>(-1, 40);
  std::memcpy(&t.device.device_type, &device_type, sizeof device_type);
  t.device.device_id = in.ConsumeIntegral<int32_t>();
  t.byte_offset = in.ConsumeBool() ? 0 : in.ConsumeIntegral<uint64_t>();
  static char storage[64];
  t.data = storage;
  try {
    const lattn::Tensor view = lattn::from_dlpack(t);
    int64_t bytes = 0;
    if (__builtin_mul_overflow(view.numel(), int64_t(view.element_size()), &bytes)) std::abort();
    (void)view.describe();
    (void)view.is_contiguous();
  } catch (const lattn::ValueError&) {}
  return 0;
}
