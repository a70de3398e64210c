// tools/serving/model.h — the attention shapes of the models `lattn` knows
// by name, tensor parallelism, and explicit overrides.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lattn/config.h"

namespace lattn::serving {

struct ModelPreset {
  std::string name;         // what --model takes
  MlaDims dims;             // the whole model's heads (before tensor parallelism)
  int default_tp = 1;       // how the model is usually served: 8 ranks for DeepSeek-V3 (one 8-GPU node)
  std::string description;  // one line for --help and `lattn info`
};

// deepseek-v3 (also deepseek-r1: the same attention), deepseek-v2-lite, minicpm3.
const std::vector<ModelPreset>& model_presets();

// What the command line says about the model.
struct ModelOptions {
  std::string model = "deepseek-v3";
  // Heads are split evenly over this many ranks and one rank runs; nullopt:
  // the preset's default_tp.
  std::optional<int> tensor_parallel_size;
  // Explicit dims override the preset's (num_heads counts the whole model's heads, before --tp).
  std::optional<int> num_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  // The softmax scale q.k is multiplied by; nullopt: the preset's (its YaRN
  // factor over sqrt(P+R) of the dims in effect, docs/mla.md).
  std::optional<double> softmax_scale;
};

// The dims of one tensor-parallel rank. Throws std::invalid_argument with a
// sentence: an unknown model (listing the known ones), a dim < 1, a --tp
// that does not divide the heads, or a softmax scale that is not positive.
// The dims' softmax_scale() is the scale in effect.
MlaDims resolve_model_dims(const ModelOptions& options);
// The tensor-parallel size in effect (the option, else the preset's default).
int resolve_tensor_parallel_size(const ModelOptions& options);

// "deepseek-v3, deepseek-r1, deepseek-v2-lite, minicpm3"
std::string model_preset_names();

}  // namespace lattn::serving
