// src/cpu/cpu_backend_common.h — argument and threading helpers shared by
// the `cpu` prefill and decode backends (internal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lattn/backend.h"
#include "lattn/tensor.h"

namespace lattn::cpu {

// Threads a run uses: ctx.num_threads, or all of OpenMP's when 0.
int thread_count(const RunContext& ctx);

inline size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Reads a host int32 vector of `count` values (any stride).
std::vector<int32_t> read_i32(const char* op, const char* arg, const Tensor& t, int64_t count);

// Reads cumulative offsets [count + 1]: int32 on the host, starting at 0,
// non-decreasing, and ending at `total` unless total < 0. ValueError naming
// `arg` otherwise.
std::vector<int32_t> read_offsets(const char* op, const char* arg, const Tensor& t, int64_t count, int64_t total);

// ValueError unless the instance parameters are usable by a CPU backend
// (positive heads and dims, finite positive scale, a supported dtype, the CPU).
void validate_prefill_params(const char* who, const PrefillBackendParams& params, const std::vector<DType>& dtypes);
void validate_decode_params(const char* who, const DecodeBackendParams& params, const std::vector<DType>& dtypes,
                            const std::vector<DType>& cache_dtypes);

// What the `cpu` prefill and decode classes share (Base: PrefillBackendClass
// or DecodeBackendClass): their name, the dtypes they run, fp8 output (the
// layer quantizes after the fact), and the CPU only: a CUDA device has its
// own backends.
template <class Base>
class CpuBackendClass : public Base {
 public:
  std::string name() const override { return "cpu"; }
  std::vector<DType> supported_dtypes() const override { return {DType::f16, DType::bf16, DType::f32}; }
  bool supports_quant_output(QuantKey key) const override { return key == QuantKey::fp8_e4m3_static_per_tensor; }
  bool supports_compute_capability(std::optional<DeviceCapability> capability) const override {
    return !capability.has_value();
  }
};

// The one shared object of a backend class (the registry hands out the same
// object to every caller: lattn/backend.h), made on first use, so that the
// registration at library load and the lattn/cpu.h accessor find it in any
// order of static initialization.
template <class Class, class Interface>
const std::shared_ptr<const Interface>& class_object() {
  static const std::shared_ptr<const Interface> object = std::make_shared<Class>();
  return object;
}

}  // namespace lattn::cpu
