// MlaDims / MLADimensions helpers.
#include "lattn/config.h"

#include <cmath>

#include "lattn/errors.h"

namespace lattn {

double yarn_mscale(double factor, double mscale_all_dim) {
  if (factor <= 1.0) return 1.0;
  return 0.1 * mscale_all_dim * std::log(factor) + 1.0;
}

float mla_softmax_scale(int qk_head_dim, double yarn_factor, double yarn_mscale_all_dim) {
  const double m = yarn_mscale(yarn_factor, yarn_mscale_all_dim);
  return float(m * m / std::sqrt(double(qk_head_dim)));
}

float MlaDims::softmax_scale() const { return float(double(softmax_scale_factor) / std::sqrt(double(qk_head_dim()))); }

namespace {
// DeepSeek's rope_scaling: {"type": "yarn", "factor": 40, "mscale_all_dim": ...}.
constexpr double kDeepSeekYarnFactor = 40.0;
float deepseek_factor(double mscale_all_dim) {
  const double m = yarn_mscale(kDeepSeekYarnFactor, mscale_all_dim);
  return float(m * m);
}
}  // namespace

MlaDims MlaDims::deepseek_v3(int num_heads) { return {num_heads, 512, 128, 64, 128, deepseek_factor(1.0)}; }
MlaDims MlaDims::deepseek_v2(int num_heads) { return {num_heads, 512, 128, 64, 128, deepseek_factor(0.707)}; }

void MlaDims::validate() const {
  auto need = [](int v, const char* field) {
    if (v <= 0) throw ValueError(std::string("MlaDims: ") + field + " must be positive, got " + std::to_string(v));
  };
  need(num_heads, "num_heads");
  need(kv_lora_rank, "kv_lora_rank");
  need(qk_nope_head_dim, "qk_nope_head_dim");
  need(qk_rope_head_dim, "qk_rope_head_dim");
  need(v_head_dim, "v_head_dim");
  if (!(std::isfinite(softmax_scale_factor) && softmax_scale_factor > 0.f)) {
    throw ValueError("MlaDims: softmax_scale_factor must be finite and positive, got " +
                     std::to_string(softmax_scale_factor));
  }
}

std::string MlaDims::str() const {
  return "N=" + std::to_string(num_heads) + " L=" + std::to_string(kv_lora_rank) +
         " P=" + std::to_string(qk_nope_head_dim) + " R=" + std::to_string(qk_rope_head_dim) +
         " V=" + std::to_string(v_head_dim);
}

std::string MLADimensions::str() const {
  return "(qk_nope_head_dim=" + std::to_string(qk_nope_head_dim) +
         ", qk_rope_head_dim=" + std::to_string(qk_rope_head_dim) + ", v_head_dim=" + std::to_string(v_head_dim) + ")";
}

}  // namespace lattn
