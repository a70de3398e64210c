// tools/serving/activations.h — the synthetic inputs of the attention layers.
//
// A serving run has no real model around its attention layers, so the
// per-token inputs (q, the normalized latent kv_c, the roped k_pe) and each
// layer's kv_b_proj weight are random, at the scale a trained model has:
//   * activations: unit variance (q after its up-projection, kv_c after
//     RMSNorm, k_pe after RoPE are all O(1) per element);
//   * kv_b_proj [N*(P+V), L]: N(0, 1/L), so k_nope = kv_c . W_UK and v keep
//     unit variance, and the logits q.k / sqrt(P+R) are O(1) — a softmax that
//     is neither uniform nor one-hot.
// Every value is a function of (seed, layer, request, position) only, so the
// same token gets the same inputs whichever step, batch or backend computes
// it: a recomputed (preempted) request, and the reference re-run of --verify,
// see exactly what the serving run saw.
#pragma once

#include <cstdint>
#include <span>

#include "lattn/config.h"
#include "lattn/tensor.h"

namespace lattn::serving {

// One token of the batch: the request it belongs to and its position in it.
struct TokenRef {
  int64_t request_id = 0;
  int32_t position = 0;
};

class ActivationSource {
 public:
  ActivationSource(uint64_t seed, const MlaDims& dims) : seed_(seed), dims_(dims) {}

  // Fills row i of each tensor with token tokens[i]'s inputs of `layer`.
  //   q     [T, N, P+R]  host, contiguous, f32/f16/bf16
  //   kv_c  [T, L]       host, contiguous, same dtype
  //   k_pe  [T, R]       host, contiguous, same dtype
  // (T = tokens.size()).
  void fill_inputs(int layer, std::span<const TokenRef> tokens, const Tensor& q, const Tensor& kv_c,
                   const Tensor& k_pe) const;

  // Fills row i with token tokens[i]'s lightning-indexer inputs of `layer`
  // (sparse layers, docs/sparse.md): unit-variance query and key, and head
  // weights of scale 1/sqrt(H·D) (DeepSeek-V3.2 folds n_heads^-0.5 and the
  // softmax scale D^-0.5 into them).
  //   q [T, H, D], k [T, D]  host, contiguous, f32/f16/bf16;  weights [T, H] host f32
  void fill_indexer_inputs(int layer, std::span<const TokenRef> tokens, const Tensor& q, const Tensor& k,
                           const Tensor& weights) const;

  // Fills `layer`'s kv_b_proj weight, (out, in) = [N*(P+V), L] host f32.
  void fill_kv_b_proj(int layer, const Tensor& weight) const;

 private:
  uint64_t seed_;
  MlaDims dims_;
};

}  // namespace lattn::serving
