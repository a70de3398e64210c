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
  // Sparse attention (DeepSeek-V3.2's lightning indexer, docs/sparse.md):
  // top-k positions per token (0 = dense), indexer heads and head dim. The
  // indexer is replicated on every tensor-parallel rank (its heads are not split).
  int index_topk = 0, index_n_heads = 0, index_head_dim = 0;
};

// A model's indexer as run: index_topk 0 = a dense model.
struct IndexerShape {
  int index_topk = 0, index_n_heads = 0, index_head_dim = 0;
};

// deepseek-v3 (also deepseek-r1: the same attention), deepseek-v3.2 (V3's MLA
// plus the lightning indexer and top-k sparse attention), deepseek-v2-lite, minicpm3.
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
  // Overrides the sparse preset's top-k (a sparse model only: --index-topk).
  std::optional<int> index_topk;
};

// The dims of one tensor-parallel rank. Throws std::invalid_argument with a
// sentence: an unknown model (listing the known ones), a dim < 1, a --tp
// that does not divide the heads, or a softmax scale that is not positive.
// The dims' softmax_scale() is the scale in effect.
MlaDims resolve_model_dims(const ModelOptions& options);
// The tensor-parallel size in effect (the option, else the preset's default).
int resolve_tensor_parallel_size(const ModelOptions& options);

// The indexer of the model (zeros for a dense one). Throws
// std::invalid_argument for --index-topk < 1 or on a dense model.
IndexerShape resolve_indexer(const ModelOptions& options);

// "deepseek-v3, deepseek-r1, deepseek-v3.2, deepseek-v2-lite, minicpm3"
std::string model_preset_names();

}  // namespace lattn::serving
