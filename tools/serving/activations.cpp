// Counter-based synthetic activations and weights.
#include "serving/activations.h"

#include <cmath>
#include <stdexcept>

#include "serving/random.h"

namespace lattn::serving {
namespace {

// Uniform on [-sqrt(3), sqrt(3)): mean 0, variance 1.
inline float unit_uniform(uint64_t bits32) {
  constexpr float kScale = 1.7320508f / 2147483648.0f;  // sqrt(3) / 2^31
  return float(int64_t(bits32) - 2147483648ll) * kScale;
}

// Writes n unit-variance values from `rng` to element offset `at` of `data`.
void fill_run(Rng& rng, void* data, DType dtype, int64_t at, int64_t n) {
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t bits = rng.next_u64();
    store_from_f32(data, dtype, at + i, unit_uniform(bits >> 32));
    if (i + 1 < n) store_from_f32(data, dtype, at + i + 1, unit_uniform(bits & 0xffffffffull));
  }
}

void check_host_rows(const char* name, const Tensor& t, int64_t rows, int64_t row_elems) {
  if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous() || t.size(0) != rows ||
      t.numel() != rows * row_elems || !is_floating(t.dtype()) || t.dtype() == DType::fp8_e4m3) {
    throw std::invalid_argument(std::string("synthetic activations: '") + name +
                                "' must be a contiguous host tensor of " + std::to_string(rows) + " rows of " +
                                std::to_string(row_elems) + " f32/f16/bf16 elements, got " +
                                (t.defined() ? t.describe() : std::string("nothing")));
  }
}

}  // namespace

void ActivationSource::fill_inputs(int layer, std::span<const TokenRef> tokens, const Tensor& q, const Tensor& kv_c,
                                   const Tensor& k_pe) const {
  const int64_t T = int64_t(tokens.size());
  const int64_t q_row = int64_t(dims_.num_heads) * dims_.qk_head_dim();
  const int64_t kv_row = dims_.kv_lora_rank, pe_row = dims_.qk_rope_head_dim;
  check_host_rows("q", q, T, q_row);
  check_host_rows("kv_c", kv_c, T, kv_row);
  check_host_rows("k_pe", k_pe, T, pe_row);
  const uint64_t layer_key = hash_combine(seed_, uint64_t(layer));
  for (int64_t t = 0; t < T; ++t) {
    Rng rng(hash_combine(hash_combine(layer_key, uint64_t(tokens[size_t(t)].request_id)),
                         uint64_t(tokens[size_t(t)].position)));
    fill_run(rng, q.data(), q.dtype(), t * q_row, q_row);
    fill_run(rng, kv_c.data(), kv_c.dtype(), t * kv_row, kv_row);
    fill_run(rng, k_pe.data(), k_pe.dtype(), t * pe_row, pe_row);
  }
}

void ActivationSource::fill_indexer_inputs(int layer, std::span<const TokenRef> tokens, const Tensor& q,
                                           const Tensor& k, const Tensor& weights) const {
  const int64_t T = int64_t(tokens.size());
  if (q.dim() != 3 || k.dim() != 2 || weights.dim() != 2 || weights.dtype() != DType::f32) {
    throw std::invalid_argument("synthetic indexer inputs: need q [T, H, D], k [T, D] and f32 weights [T, H], got " +
                                q.describe() + ", " + k.describe() + ", " + weights.describe());
  }
  const int64_t H = q.size(1), D = q.size(2);
  check_host_rows("indexer q", q, T, H * D);
  check_host_rows("indexer k", k, T, D);
  check_host_rows("indexer weights", weights, T, H);
  const float weight_scale = 1.0f / std::sqrt(float(H * D));
  // A stream of its own per token, apart from fill_inputs' (the key's second bit).
  const uint64_t layer_key = hash_combine(hash_combine(seed_, uint64_t(layer)), 1ull << 62);
  for (int64_t t = 0; t < T; ++t) {
    Rng rng(hash_combine(hash_combine(layer_key, uint64_t(tokens[size_t(t)].request_id)),
                         uint64_t(tokens[size_t(t)].position)));
    fill_run(rng, q.data(), q.dtype(), t * H * D, H * D);
    fill_run(rng, k.data(), k.dtype(), t * D, D);
    fill_run(rng, weights.data(), DType::f32, t * H, H);
    for (int64_t h = 0; h < H; ++h) weights.data_as<float>()[t * H + h] *= weight_scale;
  }
}

void ActivationSource::fill_kv_b_proj(int layer, const Tensor& weight) const {
  const int64_t rows = int64_t(dims_.num_heads) * (dims_.qk_nope_head_dim + dims_.v_head_dim);
  check_host_rows("kv_b_proj", weight, rows, dims_.kv_lora_rank);
  // A stream of its own, apart from every token's (the key's top bit).
  Rng rng(hash_combine(hash_combine(seed_, uint64_t(layer)), 1ull << 63));
  const float stddev = 1.0f / std::sqrt(float(dims_.kv_lora_rank));
  for (int64_t i = 0; i < weight.numel(); ++i)
    store_from_f32(weight.data(), weight.dtype(), i, stddev * float(rng.normal()));
}

}  // namespace lattn::serving
