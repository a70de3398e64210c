// MlaDims / MLADimensions helpers.
#include "lattn/config.h"

#include "lattn/errors.h"

namespace lattn {

void MlaDims::validate() const {
  auto need = [](int v, const char* field) {
    if (v <= 0) throw ValueError(std::string("MlaDims: ") + field + " must be positive, got " + std::to_string(v));
  };
  need(num_heads, "num_heads");
  need(kv_lora_rank, "kv_lora_rank");
  need(qk_nope_head_dim, "qk_nope_head_dim");
  need(qk_rope_head_dim, "qk_rope_head_dim");
  need(v_head_dim, "v_head_dim");
}

std::string MlaDims::str() const {
  return "N=" + std::to_string(num_heads) + " L=" + std::to_string(kv_lora_rank) + " P=" +
         std::to_string(qk_nope_head_dim) + " R=" + std::to_string(qk_rope_head_dim) + " V=" +
         std::to_string(v_head_dim);
}

std::string MLADimensions::str() const {
  return "(qk_nope_head_dim=" + std::to_string(qk_nope_head_dim) + ", qk_rope_head_dim=" +
         std::to_string(qk_rope_head_dim) + ", v_head_dim=" + std::to_string(v_head_dim) + ")";
}

}  // namespace lattn
