// The `hopper` decode backend class (registered as "hopper"): H100/H200
// (compute capability 9.x) only. Its instances are CudaDecodeBackend objects
// in hopper mode: the wgmma + TMA kernel (sm90/decode) serves bf16/f16
// activations with a cache of the same dtype, (L, R) = (512, 64) and page
// sizes that are multiples of 64; every other case the `cuda` backend serves
// runs its kernels inside the same instance (docs/hopper.md lists both).
#include <memory>

#include "cuda/cuda_decode_backend.h"
#include "lattn/backend.h"

namespace lattn::cuda {
namespace {

class HopperDecodeBackendClass final : public DecodeBackendClass {
 public:
  std::string name() const override { return "hopper"; }
  bool supports_cuda_graphs() const override { return true; }
  bool supports_compute_capability(std::optional<DeviceCapability> capability) const override {
    return capability.has_value() && capability->major == 9;
  }
  // The kernel needs sm_90a machine code (LATTN_CUDA_ARCHS containing 90a).
  bool is_available() const override {
#ifdef LATTN_WITH_SM90A
    return true;
#else
    return false;
#endif
  }
  bool supports_quant_output(QuantKey) const override { return true; }
  std::unique_ptr<DecodeBackend> create(const DecodeBackendParams& params) const override {
    return std::make_unique<CudaDecodeBackend>(params, /*hopper=*/true);
  }
};

const RegisterDecodeBackend kReg{std::make_shared<HopperDecodeBackendClass>()};

}  // namespace
}  // namespace lattn::cuda
