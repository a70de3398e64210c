// Device names and the CUDA device query (see lattn/device.h).
#include "lattn/device.h"

#include "core/ops/device_ops.h"
#include "lattn/errors.h"

namespace lattn {

std::string device_name(Device d) { return d.is_cpu() ? "cpu" : "cuda:" + std::to_string(d.index); }

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string num = text.substr(5);
    // At most 6 digits: no machine has a million GPUs, and std::stoi would
    // throw its own out_of_range text past 2^31.
    if (!num.empty() && num.size() <= 6 && num.find_first_not_of("0123456789") == std::string::npos) {
      return Device::cuda(std::stoi(num));
    }
  }
  throw ValueError("unknown device '" + text + "'; expected cpu, cuda or cuda:N");
}

CudaDeviceQuery query_cuda_devices() {
  try {
    return detail::cuda_device_ops().query_devices();
  } catch (const std::exception& e) {
    return {{}, std::string("CUDA device query failed: ") + e.what()};
  }
}

std::optional<DeviceCapability> device_capability(int cuda_index) {
  const CudaDeviceQuery q = query_cuda_devices();
  for (const auto& d : q.devices) {
    if (d.index == cuda_index) return d.capability;
  }
  return std::nullopt;
}

bool built_with_cuda() { return detail::cuda_device_ops().absent_reason == nullptr; }

}  // namespace lattn
