#include "support/gpu.h"

namespace lattn::test {

std::string gpu_unavailable_reason() {
  if (!built_with_cuda()) return "no GPU test: lattn was built without CUDA";
  const CudaDeviceQuery q = query_cuda_devices();
  if (q.devices.empty()) return "no GPU test: " + q.unavailable_reason;
  const DeviceCapability cap = q.devices[0].capability;
  if (cap.major < 8) {
    return "no GPU test: cuda:0 has compute capability " + std::to_string(cap.major) + "." + std::to_string(cap.minor) +
           ", lattn's CUDA backend needs 8.0+";
  }
  return {};
}

OwnedTensor to_device(const Tensor& host, Device device) {
  OwnedTensor d = OwnedTensor::empty(host.shape(), host.dtype(), device);
  copy_tensor(host, d.tensor());
  return d;
}

OwnedTensor to_host(const Tensor& t) {
  OwnedTensor h = OwnedTensor::empty(t.shape(), t.dtype());
  copy_tensor(t, h.tensor());
  return h;
}

}  // namespace lattn::test
