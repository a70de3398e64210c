// A program outside the lattn tree, built against the installed package (the
// test `install_consumer` builds and runs it). It is also README's C++ example:
// one MLA layer's forward over a mixed batch (a decode with cached context and
// a prefill) on the CPU, with random weights and activations.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <lattn/lattn.h>

using namespace lattn;

// Fills a host tensor of any float dtype with N(0, stddev^2).
static void fill_random(const Tensor& t, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> dist(0.f, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) store_from_f32(t.data(), t.dtype(), i, dist(rng));
}

int main() {
  const MlaDims dims = MlaDims::deepseek_v3(/*num_heads=*/16);  // a TP8 shard of DeepSeek-V3
  const int N = dims.num_heads, L = dims.kv_lora_rank, P = dims.qk_nope_head_dim, R = dims.qk_rope_head_dim,
            V = dims.v_head_dim;
  std::mt19937 rng(0);

  // The layer: backends chosen by the selector (`cpu` on a machine without a GPU).
  MlaAttention attn({.dims = dims, .dtype = DType::bf16, .kv_cache_dtype = DType::bf16});
  OwnedTensor kv_b_proj = OwnedTensor::empty({int64_t(N) * (P + V), L}, DType::bf16);  // (out, in)
  fill_random(kv_b_proj, rng, 1.f / std::sqrt(float(L)));
  attn.process_weights_after_loading(kv_b_proj);

  // A paged latent cache: 64 blocks of 16 tokens, one [kv_c | k_pe] row per token.
  OwnedLatentCache cache(/*num_blocks=*/64, /*block_size=*/16, dims, DType::bf16);

  // The step's plan: a decode with 40 cached tokens, then a new 24-token prefill.
  MlaMetadataBuilder builder({.block_size = 16, .context_chunk_workspace_size = 4096});
  const std::vector<RequestSpec> batch = {
      {.query_len = 1, .num_computed_tokens = 40, .block_table = {7, 3, 12}},
      {.query_len = 24, .num_computed_tokens = 0, .block_table = {5, 9}},
  };
  const MlaMetadata md = builder.build(batch);  // decodes first, then prefills

  // This step's activations (the model's q/kv_c/k_pe projections and RoPE).
  const int64_t T = md.num_actual_tokens;
  OwnedTensor q = OwnedTensor::empty({T, N, P + R}, DType::bf16);
  OwnedTensor kv_c = OwnedTensor::empty({T, L}, DType::bf16);
  OwnedTensor k_pe = OwnedTensor::empty({T, R}, DType::bf16);
  for (const OwnedTensor* t : {&q, &kv_c, &k_pe}) fill_random(*t, rng, 1.f);

  const Tensor out = attn.forward(q, kv_c, k_pe, cache, md);  // [T, N*V]

  double sum_sq = 0;
  for (int64_t i = 0; i < out.numel(); ++i) sum_sq += std::pow(load_as_f32(out.data(), out.dtype(), i), 2);
  if (out.size(0) != T || out.size(1) != N * V || !std::isfinite(sum_sq) || sum_sq == 0) {
    std::printf("consumer FAILED: out %s, sum of squares %g\n", out.describe().c_str(), sum_sq);
    return 1;
  }
  std::printf("consumer ok: lattn %s, %s via %s prefill + %s decode, rms %.4f\n", version(), out.describe().c_str(),
              attn.prefill_backend().name().c_str(), attn.decode_backend().name().c_str(),
              std::sqrt(sum_sq / double(out.numel())));
  return 0;
}
