// lattn/config.h — MLA dimensions as data.
//
// Notation (seed 002's design note): N heads, L = kv_lora_rank (latent dim),
// P = qk_nope_head_dim, R = qk_rope_head_dim, V = v_head_dim. A cache entry
// is [kv_c (L) | k_pe (R)]; prefill attends with QK dim P+R and V dim V;
// decode (absorbed) attends with QK dim L+R and V dim L.
// DeepSeek-V2/V3/R1 is one value of MlaDims, not a constant in the code.
#pragma once

#include <string>

namespace lattn {

// YaRN's attention temperature (DeepSeek's yarn_get_mscale): models whose RoPE
// was stretched by `factor` with YaRN scale their logits by mscale^2, where
// mscale = 0.1 * mscale_all_dim * ln(factor) + 1 (1 when factor <= 1 or
// mscale_all_dim == 0). docs/mla.md explains where this comes from.
double yarn_mscale(double factor, double mscale_all_dim);

// The softmax scale an MLA model multiplies q.k by:
// (P+R)^-0.5 * yarn_mscale(factor, mscale_all_dim)^2. Without YaRN
// (factor 1) this is the plain 1/sqrt(P+R).
float mla_softmax_scale(int qk_head_dim, double yarn_factor = 1.0, double yarn_mscale_all_dim = 0.0);

struct MlaDims {
  int num_heads = 128;         // N (per tensor-parallel shard)
  int kv_lora_rank = 512;      // L
  int qk_nope_head_dim = 128;  // P
  int qk_rope_head_dim = 64;   // R
  int v_head_dim = 128;        // V
  // Multiplies the plain softmax scale (P+R)^-0.5: YaRN's mscale^2 for
  // models trained with it (DeepSeek-V2/V3/R1), 1 otherwise; dimensionless.
  // Kept apart from P and R so that changing a head dim keeps the model's factor.
  float softmax_scale_factor = 1.0f;

  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }  // P+R (192)
  int cache_entry_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // L+R (576)
  // The softmax scale of this model: softmax_scale_factor / sqrt(P+R)
  // (0.1352 for DeepSeek-V3, 0.1147 for DeepSeek-V2, 1/sqrt(P+R) without YaRN).
  float softmax_scale() const;
  friend bool operator==(const MlaDims&, const MlaDims&) = default;

  // Throws ValueError naming the first field that is not positive.
  void validate() const;
  // "N=16 L=512 P=128 R=64 V=128"
  std::string str() const;

  // Presets from the models' published config.json files. The scale factor
  // comes from their rope_scaling (YaRN, factor 40): mscale_all_dim 1.0 for
  // DeepSeek-V3/R1, 0.707 for DeepSeek-V2 and V2-Lite. MiniCPM3 scales by
  // (P+R)^-0.5 only.
  static MlaDims deepseek_v3(int num_heads = 128);  // also DeepSeek-R1
  static MlaDims deepseek_v2(int num_heads = 128);  // also DeepSeek-V2-Lite (16 heads)
  static MlaDims minicpm3(int num_heads = 40) { return {num_heads, 256, 64, 32, 64}; }
};

// The seeds' MLADimensions (upstream vLLM): the per-head dims a prefill
// backend cares about, compared by value.
struct MLADimensions {
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  friend bool operator==(const MLADimensions&, const MLADimensions&) = default;
  // "(qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)"
  std::string str() const;
  static MLADimensions of(const MlaDims& d) { return {d.qk_nope_head_dim, d.qk_rope_head_dim, d.v_head_dim}; }
};

inline constexpr MLADimensions kDeepSeekR1MlaDimensions{128, 64, 128};

// The seeds' is_deepseek_r1_mla_compatible: dims == (128, 64, 128).
inline bool is_deepseek_r1_mla_compatible(const MLADimensions& d) { return d == kDeepSeekR1MlaDimensions; }

}  // namespace lattn
