// src/cuda/sm80/prefill/prefill_params.h — the raw-pointer parameters of one varlen
// prefill attention launch (internal; no CUDA or framework header).
//
// Attention per request b and head h, rows of request b being
// [cu_seqlens_q[b], cu_seqlens_q[b+1]) of q/out and [cu_seqlens_k[b],
// cu_seqlens_k[b+1]) of k/v:
//   out[i] = softmax(scale * q[i] · k[j]ᵀ over visible j) · v[j]
// Causal masking is aligned bottom-right, as FlashAttention-2 and vLLM do:
// with sq queries and sk keys, query i sees keys j <= i + sk - sq. For the
// new tokens of a prefill (sq == sk) that is the ordinary causal mask.
// A query that sees no key gets out = 0 and lse = -inf.
#pragma once

#include <cstdint>

namespace lattn::cuda::sm80 {

enum class PrefillElement : uint8_t { f16, bf16 };

struct PrefillParams {
  const void* q = nullptr;  // [total_q, num_heads, head_dim_qk] f16/bf16
  const void* k = nullptr;  // [total_k, num_heads, head_dim_qk]
  const void* v = nullptr;  // [total_k, num_heads, head_dim_v]
  void* out = nullptr;      // [total_q, num_heads, head_dim_v], fully written
  float* lse = nullptr;     // [num_heads, total_q] f32 natural log; may be nullptr

  // Strides in elements; the last dim of q, k, v, out is contiguous. Every
  // stride is a multiple of 8 and every pointer 16-byte aligned (checked by
  // the launcher), so rows move in 16-byte vectors.
  int64_t q_row_stride = 0, q_head_stride = 0;
  int64_t k_row_stride = 0, k_head_stride = 0;
  int64_t v_row_stride = 0, v_head_stride = 0;
  int64_t out_row_stride = 0, out_head_stride = 0;
  int64_t lse_head_stride = 0;  // the token stride of lse is 1

  const int32_t* cu_seqlens_q = nullptr;  // [batch + 1] device, cu_seqlens_q[0] == 0 not required
  const int32_t* cu_seqlens_k = nullptr;  // [batch + 1] device

  int batch = 0;
  int num_heads = 0;
  int head_dim_qk = 0;   // P + R (192 for DeepSeek)
  int head_dim_v = 0;    // V (128 for DeepSeek)
  int max_seqlen_q = 0;  // longest request's query count (sizes the grid)
  float scale = 0.f;     // softmax scale
  bool causal = false;
  PrefillElement element = PrefillElement::bf16;
};

}  // namespace lattn::cuda::sm80
