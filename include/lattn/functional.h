// lattn/functional.h — kernel-level MLA calls with LSE, for engines that own
// their layer (FlashMLA / FlashInfer style) rather than use MlaAttention.
//
//   DecodePlan plan(params, block_table, seq_lens);    // once per step (host work)
//   mla_decode(q_absorbed, cache, plan, scale, out, lse);  // per layer: launches only
//   mla_prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, out, lse, params);
//
// Both run on any registered backend: the selector's choice for the device,
// or one named in the params. Shapes use N = heads, L = kv_lora_rank,
// R = qk_rope_head_dim, Dqk = P + R, V = v_head_dim; LSE is the natural-log
// softmax denominator, f32, layout [N, T] (-inf and output 0 for a row that
// attends to nothing). docs/python.md shows the Python face of these calls.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "lattn/backend.h"
#include "lattn/cache.h"
#include "lattn/device.h"
#include "lattn/dtype.h"
#include "lattn/metadata.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn {

// What a decode plan is made for.
struct DecodePlanParams {
  int num_heads = 0;                   // N
  int kv_lora_rank = 512;              // L, elements
  int qk_rope_head_dim = 64;           // R, elements
  int query_len = 1;                   // s_q: new tokens per request (> 1: speculative / MTP decodes)
  DType dtype = DType::bf16;           // activation dtype of q and out
  DType kv_cache_dtype = DType::bf16;  // dtype of the caches the plan serves
  Device device = Device::cpu();
  Stream stream = nullptr;  // CUDA stream the metadata upload and the runs use
  std::string backend;      // decode registry name; "" = the selector's choice (env var, then automatic)
  int num_threads = 0;      // CPU backends: worker threads, 0 = all
};

// One step's decode schedule: the metadata of a decode-only batch (requests
// of query_len tokens each) on the params' device, and the backend that runs
// it. Reusable by every layer of the step; not thread-safe (a run prepares
// the backend instance it caches per scale).
class DecodePlan {
 public:
  //   block_table [B, max_blocks] int32: physical block ids per request (any device;
  //               read on the host once here)
  //   seq_lens    [B] int32: tokens per request, cached context + query_len
  //   block_size  tokens per cache block
  // Throws ValueError naming the argument (shape, dtype, a seq_len < query_len,
  // a block table too short for its seq_len), and the selector's errors when
  // no backend (or not the named one) can serve the configuration.
  DecodePlan(const DecodePlanParams& params, const Tensor& block_table, const Tensor& seq_lens, int block_size);
  // The decode rows of a step the engine already planned with
  // MlaMetadataBuilder (shares its arrays; they must be on params.device).
  // params.query_len must be >= the metadata's max_decode_query_len.
  DecodePlan(const DecodePlanParams& params, const MlaMetadata& metadata);
  ~DecodePlan();
  DecodePlan(DecodePlan&&) noexcept;
  DecodePlan& operator=(DecodePlan&&) noexcept;

  const DecodePlanParams& params() const;
  const std::string& backend_name() const;  // the decode backend that runs
  int num_requests() const;                 // B
  int num_tokens() const;                   // the rows of q: B * query_len (the metadata's decode tokens)
  int block_size() const;
  KvCacheSpec kv_cache_spec() const;       // {L, R, kv_cache_dtype, block size} of the caches it serves
  const DecodeMetadata& metadata() const;  // on the params' device
  void set_stream(Stream stream);          // for later runs (e.g. the caller's current stream)

  struct Impl;
  Impl& impl();

 private:
  static void select_backend(Impl& im);
  std::unique_ptr<Impl> impl_;
};

// Absorbed MLA decode (MQA over the latent cache):
//   q_absorbed [T, N, L+R] activation dtype: [q_nope . W_UK_T | q_pe] (T = plan.num_tokens())
//   cache      [num_blocks, block_size, L+R] f16/bf16/fp8_e4m3 of the plan's kv_cache_dtype
//   scale      softmax scale (> 0; a model's MlaDims::softmax_scale())
//   out        [T, N, L] activation dtype, written (the caller applies W_UV)
//   lse        [N, T] f32, written when defined (may be undefined)
// Token j of request r sits at position seq_len - query_len + j and attends
// causally to keys [0, that position].
void mla_decode(const Tensor& q_absorbed, const LatentCache& cache, DecodePlan& plan, float scale, const Tensor& out,
                const Tensor& lse = {});

// The same with the query in its two parts (FlashInfer's q_nope / q_pe; the
// seed's ql_nope and q_pe): ql_nope [T, N, L], q_pe [T, N, R], any row strides.
void mla_decode(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache, DecodePlan& plan, float scale,
                const Tensor& out, const Tensor& lse = {});

// FlashInfer's split latent cache, ckv [num_blocks, block_size, L] and kpe
// [num_blocks, block_size, R] of one dtype and device, as lattn's combined
// cache. Zero-copy when they are the two halves of one [.., L+R] buffer (kpe
// starts L elements after ckv, same strides); otherwise ValueError (use
// mla_decode's two-tensor form, which copies).
LatentCache latent_cache_from_parts(const Tensor& ckv, const Tensor& kpe, float scale = 1.0f);
// Whether latent_cache_from_parts would succeed without a copy.
bool latent_cache_parts_are_adjacent(const Tensor& ckv, const Tensor& kpe);

// mla_decode with the split cache: zero-copy when the parts are adjacent,
// else they are copied into a combined cache owned by the plan (reused while
// the cache shape stays the same; a copy of the whole cache per call, so
// prefer the combined layout where the engine can choose). f16/bf16 only.
void mla_decode(const Tensor& q_absorbed, const Tensor& ckv, const Tensor& kpe, DecodePlan& plan, float scale,
                const Tensor& out, const Tensor& lse = {});

// What a prefill call runs with.
struct PrefillCallParams {
  Device device = Device::cpu();
  Stream stream = nullptr;
  std::string backend;       // prefill registry name; "" = the selector's choice
  int qk_rope_head_dim = 0;  // R, for the backends' dimension checks; 0 = Dqk / 3 (DeepSeek's and MiniCPM3's split)
  int kv_lora_rank = 512;    // L, the model's latent dim (prefill attends in Dqk / V; backends only check it)
  int num_threads = 0;
};

// Variable-length attention of packed sequences (FlashAttention's varlen
// convention), each backend's prefill kernel:
//   q [Tq, N, Dqk], k [Tk, N, Dqk], v [Tk, N, V]  activation dtype, on params.device
//   cu_seqlens_q [B+1], cu_seqlens_k [B+1] int32, starting at 0, non-decreasing
//                (any device; read on the host)
//   causal       true: sequence b's query i attends to its keys [0, i]; needs
//                cu_seqlens_q == cu_seqlens_k (queries and keys are the same
//                tokens). false: every query of b attends to all keys of b.
//   out [Tq, N, V] written; lse [N, Tq] f32 written when defined.
// Returns the name of the backend that ran.
std::string mla_prefill(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                        const Tensor& cu_seqlens_k, bool causal, float scale, const Tensor& out, const Tensor& lse,
                        const PrefillCallParams& params = {});

}  // namespace lattn
