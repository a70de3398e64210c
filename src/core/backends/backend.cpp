// Backend class defaults: dtype support, validate_configuration with the
// seeds' reason texts (docs/backends.md), SelectorConfig, and the
// built-in registration table.
#include "lattn/backend.h"

#include <algorithm>

#include "core/backends/builtin_backends.h"

namespace lattn {
namespace {

std::string capability_reason(std::optional<DeviceCapability> capability) {
  if (!capability) return "compute capability none (cpu) not supported";
  return "compute capability " + std::to_string(capability->major) + "." + std::to_string(capability->minor) +
         " not supported";
}

// "a, b, c": each item as `say` writes it.
template <class Item, class Say>
std::string join(const std::vector<Item>& items, Say&& say) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) s += ", ";
    s += say(items[i]);
  }
  return s;
}

std::string join_dims(const std::vector<MLADimensions>& dims) {
  return join(dims, [](const MLADimensions& d) { return d.str(); });
}

// The reasons both kinds of backend class give first, in the seeds' order:
// compute capability, dtype, availability.
template <class Class>
std::vector<std::string> common_reasons(const Class& cls, std::optional<DeviceCapability> capability,
                                        const SelectorConfig& config) {
  std::vector<std::string> reasons;
  if (!cls.supports_compute_capability(capability)) reasons.push_back(capability_reason(capability));
  if (!cls.supports_dtype(config.dtype))
    reasons.push_back(std::string("dtype ") + dtype_torch_name(config.dtype) + " not supported");
  if (!cls.is_available()) reasons.push_back("required dependencies not available");
  return reasons;
}

template <class Class>
bool supports(const Class& cls, DType dtype) {
  const auto d = cls.supported_dtypes();
  return std::find(d.begin(), d.end(), dtype) != d.end();
}

}  // namespace

std::string SelectorConfig::repr() const {
  return std::string("MLAPrefillSelectorConfig(dtype=") + dtype_torch_name(dtype) +
         ", mla_dimensions=" + mla_dimensions.str() + ")";
}

std::string SelectorConfig::decode_repr() const {
  return std::string("MLADecodeSelectorConfig(dtype=") + dtype_torch_name(dtype) +
         ", kv_cache_dtype=" + dtype_torch_name(kv_cache_dtype) + ", num_heads=" + std::to_string(num_heads) +
         ", kv_lora_rank=" + std::to_string(kv_lora_rank) + ", qk_rope_head_dim=" + std::to_string(qk_rope_head_dim) +
         ", block_size=" + std::to_string(block_size) +
         ", max_query_tokens_per_request=" + std::to_string(max_query_tokens_per_request) + ")";
}

SelectorConfig SelectorConfig::for_dims(const MlaDims& dims, DType dtype, DType kv_cache_dtype, Device device,
                                        int block_size, int max_query_tokens_per_request) {
  SelectorConfig c;
  c.dtype = dtype;
  c.mla_dimensions = MLADimensions::of(dims);
  c.is_r1_compatible = is_deepseek_r1_mla_compatible(c.mla_dimensions);
  c.device = device;
  c.num_heads = dims.num_heads;
  c.set_kv_cache_spec({dims.kv_lora_rank, dims.qk_rope_head_dim, kv_cache_dtype, block_size});
  c.max_query_tokens_per_request = max_query_tokens_per_request;
  return c;
}

bool PrefillBackendClass::supports_dtype(DType dtype) const { return supports(*this, dtype); }

std::vector<std::string> PrefillBackendClass::validate_configuration(std::optional<DeviceCapability> capability,
                                                                     const SelectorConfig& config) const {
  std::vector<std::string> reasons = common_reasons(*this, capability, config);
  if (requires_r1_mla_dimensions() && !config.is_r1_compatible) {
    reasons.push_back(
        "model does not have DeepSeek R1 MLA dimensions (qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)");
  }
  const auto supported = supported_mla_dimensions();
  if (!supported.empty() && std::find(supported.begin(), supported.end(), config.mla_dimensions) == supported.end()) {
    reasons.push_back("Model does not have supported MLA dimensions (got " + config.mla_dimensions.str() +
                      "; supported: " + join_dims(supported) + ")");
  }
  return reasons;
}

bool DecodeBackendClass::supports_dtype(DType dtype) const { return supports(*this, dtype); }

std::vector<std::string> DecodeBackendClass::validate_configuration(std::optional<DeviceCapability> capability,
                                                                    const SelectorConfig& config) const {
  std::vector<std::string> reasons = common_reasons(*this, capability, config);
  const auto cache_dtypes = supported_kv_cache_dtypes();
  if (std::find(cache_dtypes.begin(), cache_dtypes.end(), config.kv_cache_dtype) == cache_dtypes.end()) {
    // u8 is the fp8_ds_mla format (lattn/sparse.h): only sparse attention reads it.
    reasons.push_back(config.kv_cache_dtype == DType::u8
                          ? std::string("kv cache dtype fp8_ds_mla not supported (dense attention; the format is read "
                                        "by sparse MLA only: sparse_mla, or MlaAttentionConfig::index_topk)")
                          : std::string("kv cache dtype ") + dtype_torch_name(config.kv_cache_dtype) +
                                " not supported");
  }
  const auto blocks = supported_block_sizes();
  if (!blocks.empty() && std::find(blocks.begin(), blocks.end(), config.block_size) == blocks.end()) {
    reasons.push_back("block size " + std::to_string(config.block_size) +
                      " not supported (supported: " + join(blocks, [](int b) { return std::to_string(b); }) + ")");
  }
  const auto latents = supported_latent_dims();
  const std::pair<int, int> mine{config.kv_lora_rank, config.qk_rope_head_dim};
  if (!latents.empty() && std::find(latents.begin(), latents.end(), mine) == latents.end()) {
    const auto pair = [](const std::pair<int, int>& p) {
      return "(" + std::to_string(p.first) + ", " + std::to_string(p.second) + ")";
    };
    reasons.push_back("latent dims " + pair(mine) + " not supported (supported: " + join(latents, pair) + ")");
  }
  if (config.max_query_tokens_per_request > max_query_tokens_per_request()) {
    reasons.push_back(std::to_string(config.max_query_tokens_per_request) +
                      " query tokens per request not supported (max " + std::to_string(max_query_tokens_per_request()) +
                      ")");
  }
  return reasons;
}

namespace detail {

std::vector<std::shared_ptr<const PrefillBackendClass>>& builtin_prefill_classes() {
  static std::vector<std::shared_ptr<const PrefillBackendClass>> classes;
  return classes;
}

std::vector<std::shared_ptr<const DecodeBackendClass>>& builtin_decode_classes() {
  static std::vector<std::shared_ptr<const DecodeBackendClass>> classes;
  return classes;
}

}  // namespace detail

RegisterPrefillBackend::RegisterPrefillBackend(std::shared_ptr<const PrefillBackendClass> cls) {
  detail::builtin_prefill_classes().push_back(std::move(cls));
}

RegisterDecodeBackend::RegisterDecodeBackend(std::shared_ptr<const DecodeBackendClass> cls) {
  detail::builtin_decode_classes().push_back(std::move(cls));
}

}  // namespace lattn
