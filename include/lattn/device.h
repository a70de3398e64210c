// lattn/device.h — where a tensor lives, and what CUDA devices exist.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lattn {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  constexpr bool is_cpu() const { return type == DeviceType::cpu; }
  constexpr bool is_cuda() const { return type == DeviceType::cuda; }
  friend constexpr bool operator==(Device a, Device b) {
    return a.type == b.type && (a.type == DeviceType::cpu || a.index == b.index);
  }
};

// "cpu" or "cuda:N".
std::string device_name(Device d);
// Parses "cpu", "cuda", "cuda:N". Throws ValueError otherwise.
Device parse_device(const std::string& text);

// Compute capability (major, minor), e.g. {9, 0} for H100/H200.
struct DeviceCapability {
  int major = 0;
  int minor = 0;
  friend constexpr bool operator==(DeviceCapability a, DeviceCapability b) = default;
  friend constexpr auto operator<=>(DeviceCapability a, DeviceCapability b) = default;
  int as_int() const { return major * 10 + minor; }  // 90 for 9.0
};

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  DeviceCapability capability;
  int sm_count = 0;
  uint64_t total_memory_bytes = 0;
  uint64_t l2_cache_bytes = 0;
  int max_shared_memory_per_block_optin = 0;  // bytes, after cudaFuncSetAttribute
};

struct CudaDeviceQuery {
  std::vector<CudaDeviceInfo> devices;
  // Empty when at least one device was found; otherwise why not, as one line:
  // "lattn was built without CUDA", "no CUDA device (cudaErrorNoDevice: ...)",
  // "no CUDA driver (...)".
  std::string unavailable_reason;
};

// Queries the CUDA devices once per call. Never throws: on a machine with no
// driver or no GPU it returns no devices and a reason.
CudaDeviceQuery query_cuda_devices();

// Capability of the given CUDA device, or nullopt when it does not exist
// (including builds without CUDA). The seeds' get_device_capability().
std::optional<DeviceCapability> device_capability(int cuda_index = 0);

// True when lattn was compiled with its CUDA backends.
bool built_with_cuda();

}  // namespace lattn
