// src/cuda/sm80/prefill/prefill_launch.cu — run-time -> compile-time dispatch of the
// prefill kernels: (config row, element type, causal) -> kernel instance.
#include "cuda/sm80/prefill/prefill_launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "cuda/sm80/prefill/prefill_instantiations.h"
#include "lattn/errors.h"

namespace lattn::cuda::sm80 {
namespace {

using LaunchFn = void (*)(const PrefillParams&, cudaStream_t);

struct ConfigLaunchers {
  LaunchFn bf16[2];  // [causal]
  LaunchFn f16[2];   // nullptr for candidate rows (bf16 only)
};

template <int kConfig>
constexpr ConfigLaunchers launchers_of() {
  ConfigLaunchers l{
      {&launch_prefill_kernel<kConfig, __nv_bfloat16, false>, &launch_prefill_kernel<kConfig, __nv_bfloat16, true>},
      {nullptr, nullptr}};
  if constexpr (!kPrefillTileConfigs[kConfig].candidate) {
    l.f16[0] = &launch_prefill_kernel<kConfig, __half, false>;
    l.f16[1] = &launch_prefill_kernel<kConfig, __half, true>;
  }
  return l;
}

template <int... kConfigs>
constexpr auto make_table(std::integer_sequence<int, kConfigs...>) {
  return std::array<ConfigLaunchers, sizeof...(kConfigs)>{launchers_of<kConfigs>()...};
}

const auto kLaunchers = make_table(std::make_integer_sequence<int, kNumPrefillTileConfigs>{});

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Offsets inside one K/V/Q tile are 32-bit: (rows per tile <= 256) x row
// stride must stay below 2^31 elements.
constexpr int64_t kMaxRowStride = int64_t{1} << 23;

void check_vector_access(const char* name, const void* p, int64_t row_stride, int64_t head_stride) {
  if (!aligned16(p)) {
    throw ValueError(std::string("prefill attention: '") + name +
                     "' must be 16-byte aligned (the kernel moves rows in 16-byte vectors)");
  }
  for (int64_t s : {row_stride, head_stride}) {
    if (s % 8 != 0 || s < 0) {
      throw ValueError(std::string("prefill attention: the row and head strides of '") + name +
                       "' must be non-negative multiples of 8 elements, got " + std::to_string(s));
    }
  }
  if (row_stride >= kMaxRowStride) {
    throw ValueError(std::string("prefill attention: the row stride of '") + name +
                     "' must be below 2^23 elements, got " + std::to_string(row_stride));
  }
}

}  // namespace

void run_prefill_attention(const PrefillParams& p, Stream stream, int config_index) {
  if (config_index < 0) {
    config_index = default_prefill_config(p.head_dim_qk, p.head_dim_v);
    if (config_index < 0) {
      throw ValueError("prefill attention: head dims (qk " + std::to_string(p.head_dim_qk) + ", v " +
                       std::to_string(p.head_dim_v) +
                       ") have no sm80 kernel (supported (qk, v): " + supported_prefill_head_dims() + ")");
    }
  }
  if (config_index >= kNumPrefillTileConfigs) {
    throw ValueError("prefill attention: config index " + std::to_string(config_index) + " out of range [0, " +
                     std::to_string(kNumPrefillTileConfigs) + ")");
  }
  const PrefillTileConfig& cfg = kPrefillTileConfigs[config_index];
  if (cfg.head_dim_qk != p.head_dim_qk || cfg.head_dim_v != p.head_dim_v) {
    throw ValueError(std::string("prefill attention: config ") + cfg.name + " serves head dims (qk " +
                     std::to_string(cfg.head_dim_qk) + ", v " + std::to_string(cfg.head_dim_v) + "), got (qk " +
                     std::to_string(p.head_dim_qk) + ", v " + std::to_string(p.head_dim_v) + ")");
  }
  if (p.batch < 0 || p.num_heads < 0 || p.max_seqlen_q < 0) {
    throw ValueError("prefill attention: batch, num_heads and max_seqlen_q must be >= 0");
  }
  if (!(std::isfinite(p.scale) && p.scale > 0.f)) {
    throw ValueError("prefill attention: scale must be a positive finite number, got " + std::to_string(p.scale));
  }
  if (p.batch == 0 || p.num_heads == 0 || p.max_seqlen_q == 0) return;
  if (p.cu_seqlens_q == nullptr || p.cu_seqlens_k == nullptr) {
    throw ValueError("prefill attention: cu_seqlens_q and cu_seqlens_k must be device pointers, got nullptr");
  }
  check_vector_access("q", p.q, p.q_row_stride, p.q_head_stride);
  check_vector_access("k", p.k, p.k_row_stride, p.k_head_stride);
  check_vector_access("v", p.v, p.v_row_stride, p.v_head_stride);
  check_vector_access("out", p.out, p.out_row_stride, p.out_head_stride);

  const ConfigLaunchers& l = kLaunchers[size_t(config_index)];
  const LaunchFn fn = p.element == PrefillElement::bf16 ? l.bf16[p.causal] : l.f16[p.causal];
  if (fn == nullptr) {
    throw ValueError(std::string("prefill attention: candidate config ") + cfg.name + " is compiled for bf16 only");
  }
  fn(p, stream);
}

}  // namespace lattn::cuda::sm80
