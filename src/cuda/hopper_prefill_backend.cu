// The `hopper` prefill backend: the `cuda` backend's checks and parameters
// (cuda_prefill_backend.h) with the sm_90a kernel of src/cuda/sm90/prefill/
// for the head dims it has (192/128, DeepSeek's), and the sm80 kernels for
// the other pairs the `cuda` backend serves (96/64, 256/256), so that the
// selector can pick `hopper` for every model on an H100/H200. docs/hopper.md
// ("Prefill") lists which case takes which path.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_prefill_backend.h"
#include "cuda/sm80/prefill/prefill_launch.h"
#include "cuda/sm90/prefill/prefill_launch.h"
#include "lattn/backend.h"
#include "lattn/check.h"
#include "lattn/device.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

bool is_sm90(std::optional<DeviceCapability> capability) {
  return capability.has_value() && capability->major == 9 && capability->minor == 0;
}

class HopperPrefillBackend final : public CudaPrefillBackend {
 public:
  // The dynamic tile walk's counters are allocated here, not at the first
  // launch, which may be inside a CUDA graph capture.
  explicit HopperPrefillBackend(const PrefillBackendParams& params) : CudaPrefillBackend(params) {
    cuda::sm90::reserve_hopper_prefill_counters(params.context.device.index);
  }
  std::string name() const override { return "hopper"; }

 protected:
  void launch_on_device(const cuda::sm80::PrefillParams& p, int64_t q_rows, int64_t kv_rows) const override {
    if (cuda::sm90::hopper_prefill_config(p.head_dim_qk, p.head_dim_v) >= 0) {
      cuda::sm90::run_hopper_prefill_attention(p, q_rows, kv_rows, params_.context.stream);
    } else {
      cuda::sm80::run_prefill_attention(p, params_.context.stream);
    }
  }
};

class HopperPrefillBackendClass final : public PrefillBackendClass {
 public:
  std::string name() const override { return "hopper"; }

  // The sm_90a code runs on compute capability 9.0 only (H100, H200, H800).
  bool supports_compute_capability(std::optional<DeviceCapability> capability) const override {
    return is_sm90(capability);
  }

  // False in a build without sm_90a code: the selector then falls through to `cuda`.
  bool is_available() const override { return cuda::sm90::hopper_prefill_compiled(); }

  std::vector<std::string> validate_configuration(std::optional<DeviceCapability> capability,
                                                  const SelectorConfig& config) const override {
    return cuda_prefill_configuration_reasons(*this, capability, config);
  }

  std::unique_ptr<PrefillBackend> create(const PrefillBackendParams& params) const override {
    constexpr const char* op = "hopper prefill backend";
    if (!is_available()) {
      throw BackendUnavailableError(std::string(op) +
                                    ": this build of lattn has no sm_90a code (configure with LATTN_CUDA_ARCHS "
                                    "containing 90a). Select cuda, or leave the choice to the selector.");
    }
    check_arg(params.context.device.is_cuda(), op, "params.context.device", "a CUDA device",
              device_name(params.context.device));
    const std::optional<DeviceCapability> cap = device_capability(params.context.device.index);
    check_arg(is_sm90(cap), op, "params.context.device", "a device of compute capability 9.0",
              device_name(params.context.device) +
                  (cap ? " of compute capability " + std::to_string(cap->major) + "." + std::to_string(cap->minor)
                       : std::string(" (no such device)")));
    check_cuda_prefill_backend_params(op, *this, params);
    return std::make_unique<HopperPrefillBackend>(params);
  }
};

const RegisterPrefillBackend kReg{std::make_shared<HopperPrefillBackendClass>()};

}  // namespace
}  // namespace lattn
