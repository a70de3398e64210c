// tests/cpp/support/backend_doubles.h — test doubles of the backend *class*
// interface (what the registry and selector see): every answer is set by the
// test, and validate_configuration calls are counted. They create no
// instances (create() throws): selection tests never run a kernel.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lattn/backend.h"
#include "lattn/errors.h"
#include "lattn/registry.h"
#include "lattn/selector.h"

namespace lattn::test {

using CapabilityRule = std::function<bool(std::optional<DeviceCapability>)>;

inline bool any_capability(std::optional<DeviceCapability>) { return true; }

struct PrefillDoubleOptions {
  std::string name = "prefill_double";
  std::vector<DType> dtypes{DType::f16, DType::bf16};
  std::vector<MLADimensions> supported_dims{};  // empty = any
  bool requires_r1 = false;
  CapabilityRule capability = any_capability;
  bool available = true;
};

class PrefillClassDouble final : public PrefillBackendClass {
 public:
  explicit PrefillClassDouble(PrefillDoubleOptions options) : options_(std::move(options)) {}
  std::string name() const override { return options_.name; }
  std::vector<DType> supported_dtypes() const override { return options_.dtypes; }
  std::vector<MLADimensions> supported_mla_dimensions() const override { return options_.supported_dims; }
  bool requires_r1_mla_dimensions() const override { return options_.requires_r1; }
  bool supports_compute_capability(std::optional<DeviceCapability> c) const override { return options_.capability(c); }
  bool is_available() const override { return options_.available; }
  std::vector<std::string> validate_configuration(std::optional<DeviceCapability> capability,
                                                  const SelectorConfig& config) const override {
    ++validations;
    return PrefillBackendClass::validate_configuration(capability, config);
  }
  std::unique_ptr<PrefillBackend> create(const PrefillBackendParams&) const override {
    throw NotImplementedError("test double " + options_.name + " creates no instances");
  }
  mutable std::atomic<int> validations{0};

 private:
  PrefillDoubleOptions options_;
};

struct DecodeDoubleOptions {
  std::string name = "decode_double";
  std::vector<DType> dtypes{DType::f16, DType::bf16};
  std::vector<DType> kv_cache_dtypes{DType::f16, DType::bf16, DType::fp8_e4m3};
  std::vector<int> block_sizes{};                  // empty = any
  std::vector<std::pair<int, int>> latent_dims{};  // empty = any
  int max_query_tokens = 1 << 30;
  CapabilityRule capability = any_capability;
  bool available = true;
};

class DecodeClassDouble final : public DecodeBackendClass {
 public:
  explicit DecodeClassDouble(DecodeDoubleOptions options) : options_(std::move(options)) {}
  std::string name() const override { return options_.name; }
  std::vector<DType> supported_dtypes() const override { return options_.dtypes; }
  std::vector<DType> supported_kv_cache_dtypes() const override { return options_.kv_cache_dtypes; }
  std::vector<int> supported_block_sizes() const override { return options_.block_sizes; }
  std::vector<std::pair<int, int>> supported_latent_dims() const override { return options_.latent_dims; }
  int max_query_tokens_per_request() const override { return options_.max_query_tokens; }
  bool supports_compute_capability(std::optional<DeviceCapability> c) const override { return options_.capability(c); }
  bool is_available() const override { return options_.available; }
  std::vector<std::string> validate_configuration(std::optional<DeviceCapability> capability,
                                                  const SelectorConfig& config) const override {
    ++validations;
    return DecodeBackendClass::validate_configuration(capability, config);
  }
  std::unique_ptr<DecodeBackend> create(const DecodeBackendParams&) const override {
    throw NotImplementedError("test double " + options_.name + " creates no instances");
  }
  mutable std::atomic<int> validations{0};

 private:
  DecodeDoubleOptions options_;
};

inline std::shared_ptr<PrefillClassDouble> prefill_double(PrefillDoubleOptions options) {
  return std::make_shared<PrefillClassDouble>(std::move(options));
}
inline std::shared_ptr<DecodeClassDouble> decode_double(DecodeDoubleOptions options) {
  return std::make_shared<DecodeClassDouble>(std::move(options));
}

// Capability rules for doubles.
inline CapabilityRule cuda_at_least(int major) {
  return [major](std::optional<DeviceCapability> c) { return c && c->major >= major; };
}
inline bool cpu_only(std::optional<DeviceCapability> c) { return !c; }

// Puts both registries and the selector back as a fresh process has them:
// no overrides, no memoized choices. Tests call it before and after each case.
inline void reset_backend_selection_state() {
  for (const auto& name : mla_prefill_backend_registry().names()) mla_prefill_backend_registry().clear_override(name);
  for (const auto& name : mla_decode_backend_registry().names()) mla_decode_backend_registry().clear_override(name);
  clear_mla_backend_selection_cache();
}

}  // namespace lattn::test
