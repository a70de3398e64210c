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

struct MlaDims {
  int num_heads = 128;        // N (per tensor-parallel shard)
  int kv_lora_rank = 512;     // L
  int qk_nope_head_dim = 128; // P
  int qk_rope_head_dim = 64;  // R
  int v_head_dim = 128;       // V

  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }  // P+R (192)
  int cache_entry_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // L+R (576)
  friend bool operator==(const MlaDims&, const MlaDims&) = default;

  // Throws ValueError naming the first field that is not positive.
  void validate() const;
  // "N=16 L=512 P=128 R=64 V=128"
  std::string str() const;

  static MlaDims deepseek_v3(int num_heads = 128) { return {num_heads, 512, 128, 64, 128}; }
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
