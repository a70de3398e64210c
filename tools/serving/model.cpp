// Model presets (published configs) and their tensor-parallel shard.
#include "serving/model.h"

#include <cmath>
#include <stdexcept>

namespace lattn::serving {

const std::vector<ModelPreset>& model_presets() {
  // Attention dims from each model's published config.json
  // (num_attention_heads, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim),
  // and the softmax scale its modelling code uses (MlaDims' presets: YaRN's
  // mscale^2 / sqrt(P+R) for DeepSeek, 1 / sqrt(P+R) for MiniCPM3).
  static const std::vector<ModelPreset> presets = {
      {"deepseek-v3", MlaDims::deepseek_v3(128), 8, "DeepSeek-V3: 128 heads, L=512 R=64, P=128 V=128"},
      {"deepseek-r1", MlaDims::deepseek_v3(128), 8, "DeepSeek-R1: the attention of DeepSeek-V3"},
      // DeepSeek-V3.2's config.json: index_topk 2048, index_n_heads 64, index_head_dim 128.
      {"deepseek-v3.2", MlaDims::deepseek_v3(128), 8,
       "DeepSeek-V3.2: V3's MLA plus a lightning indexer (64 heads x 128), sparse attention over the top 2048 tokens",
       2048, 64, 128},
      {"deepseek-v2-lite", MlaDims::deepseek_v2(16), 1,
       "DeepSeek-V2-Lite: 16 heads, L=512 R=64, P=128 V=128 (V2's YaRN scale)"},
      {"minicpm3", MlaDims::minicpm3(40), 1, "MiniCPM3-4B: 40 heads, L=256 R=32, P=64 V=64"},
  };
  return presets;
}

std::string model_preset_names() {
  std::string names;
  for (const ModelPreset& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

namespace {

const ModelPreset& find_preset(const std::string& name) {
  for (const ModelPreset& p : model_presets()) {
    if (p.name == name) return p;
  }
  throw std::invalid_argument("unknown model '" + name + "'; the known models are " + model_preset_names() +
                              " (any other shape: pick one and change its dims with --num-heads, --kv-lora-rank, "
                              "--qk-nope-head-dim, --qk-rope-head-dim, --v-head-dim)");
}

}  // namespace

IndexerShape resolve_indexer(const ModelOptions& options) {
  const ModelPreset& preset = find_preset(options.model);
  IndexerShape shape{preset.index_topk, preset.index_n_heads, preset.index_head_dim};
  if (options.index_topk) {
    if (shape.index_topk == 0) {
      throw std::invalid_argument("--index-topk applies to sparse models (deepseek-v3.2); " + options.model +
                                  " attends densely");
    }
    if (*options.index_topk < 1) {
      throw std::invalid_argument("--index-topk must be at least 1, got " + std::to_string(*options.index_topk));
    }
    shape.index_topk = *options.index_topk;
  }
  return shape;
}

int resolve_tensor_parallel_size(const ModelOptions& options) {
  return options.tensor_parallel_size.value_or(find_preset(options.model).default_tp);
}

MlaDims resolve_model_dims(const ModelOptions& options) {
  const ModelPreset* preset = &find_preset(options.model);
  MlaDims dims = preset->dims;
  auto override_dim = [](int& field, const std::optional<int>& value, const char* flag) {
    if (!value) return;
    if (*value < 1)
      throw std::invalid_argument(std::string(flag) + " must be at least 1, got " + std::to_string(*value));
    field = *value;
  };
  override_dim(dims.num_heads, options.num_heads, "--num-heads");
  override_dim(dims.kv_lora_rank, options.kv_lora_rank, "--kv-lora-rank");
  override_dim(dims.qk_nope_head_dim, options.qk_nope_head_dim, "--qk-nope-head-dim");
  override_dim(dims.qk_rope_head_dim, options.qk_rope_head_dim, "--qk-rope-head-dim");
  override_dim(dims.v_head_dim, options.v_head_dim, "--v-head-dim");
  if (options.softmax_scale) {
    const double scale = *options.softmax_scale;
    if (!(std::isfinite(scale) && scale > 0.0)) {
      throw std::invalid_argument("--softmax-scale must be a positive number, got " + std::to_string(scale));
    }
    // Kept as a factor over 1/sqrt(P+R), as the presets keep it.
    dims.softmax_scale_factor = float(scale * std::sqrt(double(dims.qk_head_dim())));
  }

  const int tp = resolve_tensor_parallel_size(options);
  if (tp < 1) throw std::invalid_argument("--tp must be at least 1, got " + std::to_string(tp));
  if (dims.num_heads % tp != 0) {
    throw std::invalid_argument("--tp " + std::to_string(tp) + " does not divide the " +
                                std::to_string(dims.num_heads) + " heads of " + options.model +
                                " (tensor parallelism gives every rank the same number of heads)");
  }
  dims.num_heads /= tp;
  return dims;
}

}  // namespace lattn::serving
