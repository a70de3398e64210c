// lattn/backend.h — the prefill and decode backend interfaces.
//
// A backend comes in two parts, as the seeds' Python classes do:
//  * a *class* (PrefillBackendClass / DecodeBackendClass): what the seeds
//    express with ClassVars and classmethods — name, supported dtypes and
//    dims, compute capability, availability, validate_configuration — and a
//    factory for instances. Classes live in the registry (lattn/registry.h).
//  * an *instance* (PrefillBackend / DecodeBackend): built for one layer
//    configuration; prepare_metadata() plans a step, run*() only launches.
//
// Tensors: every tensor lives on the instance's device (RunContext::device);
// shapes are given per parameter below with N = num_heads, P =
// qk_nope_head_dim, R = qk_rope_head_dim, V = v_head_dim, L = kv_lora_rank;
// dims and sizes count elements, strides are in elements (lattn/tensor.h).
// A backend may require contiguous last dims; it refuses anything it cannot
// run with a ValueError naming the argument, expected and received value
// (lattn/check.h), before writing any output. LSE is the natural-log softmax denominator in layout
// [num_heads, num_tokens] (FlashAttention's order), f32; a row that attended
// to nothing has LSE -inf and output 0.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lattn/cache.h"
#include "lattn/config.h"
#include "lattn/device.h"
#include "lattn/dtype.h"
#include "lattn/kv_cache_spec.h"
#include "lattn/metadata.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn {

// What the selector knows about a layer when it picks backends (the seeds'
// MLAPrefillSelectorConfig, extended with what decode backends need).
struct SelectorConfig {
  DType dtype = DType::bf16;       // activation dtype
  MLADimensions mla_dimensions{};  // newer seed revision (S0)
  bool is_r1_compatible = false;   // older seed revision (S1)
  Device device = Device::cpu();   // where the tensors live
  // Decode-side facts (ignored by prefill backends):
  int num_heads = 0;
  int kv_lora_rank = 0;                  // L
  int qk_rope_head_dim = 0;              // R
  DType kv_cache_dtype = DType::bf16;    // f16, bf16 or fp8_e4m3
  int block_size = 16;                   // tokens per cache block
  int max_query_tokens_per_request = 1;  // decode s_q (speculative / MTP > 1)
  // Explicit choices (the seeds' attention_config.mla_prefill_backend): a
  // registry member name, "" = the environment variable LATTN_MLA_PREFILL_BACKEND
  // / LATTN_MLA_DECODE_BACKEND, and when that is unset too, automatic
  // selection (lattn/selector.h).
  std::string prefill_backend;
  std::string decode_backend;

  // "MLAPrefillSelectorConfig(dtype=torch.bfloat16, mla_dimensions=(qk_nope_head_dim=..., ...))"
  std::string repr() const;
  // "MLADecodeSelectorConfig(dtype=torch.bfloat16, kv_cache_dtype=torch.bfloat16, num_heads=16,
  //  kv_lora_rank=512, qk_rope_head_dim=64, block_size=16, max_query_tokens_per_request=1)"
  std::string decode_repr() const;
  static SelectorConfig for_dims(const MlaDims& dims, DType dtype, DType kv_cache_dtype, Device device,
                                 int block_size = 16, int max_query_tokens_per_request = 1);
  // The cache facts above as one value (scale 1: backends are chosen without it), and
  // setting them from one.
  KvCacheSpec kv_cache_spec() const { return {kv_lora_rank, qk_rope_head_dim, kv_cache_dtype, block_size}; }
  void set_kv_cache_spec(const KvCacheSpec& spec) {
    kv_lora_rank = spec.kv_lora_rank;
    qk_rope_head_dim = spec.qk_rope_head_dim;
    kv_cache_dtype = spec.dtype;
    block_size = spec.block_size;
  }
  friend bool operator==(const SelectorConfig&, const SelectorConfig&) = default;
};

// Output quantization a backend may fuse (the seeds' QuantKey): fp8 e4m3 with
// one static per-tensor scale is the only kind the seeds' callers use.
enum class QuantKey { fp8_e4m3_static_per_tensor };

// Where and how an instance runs.
struct RunContext {
  Device device = Device::cpu();  // where every tensor passed to run* lives
  Stream stream = nullptr;        // CUDA stream run* enqueue on (device backends); ignored on the CPU
  int num_threads = 0;            // CPU backends: worker threads, 0 = all (OpenMP default)
  // Batch-invariant mode (docs/mla.md, "Batch invariance"): every output bit
  // of a request depends only on that request's own inputs, never on its
  // batchmates or its position in the batch (fixed split sizes, fixed
  // reduction orders, fixed tiles).
  bool batch_invariant = false;
};

// ---------------------------------------------------------------------------
// Prefill (compute-friendly path): ordinary MHA with QK dim P+R and V dim V.

// The seeds' constructor (num_heads, scale, kv_lora_rank, qk_nope_head_dim,
// qk_rope_head_dim, v_head_dim, vllm_config): the six numbers, and in place
// of vllm_config the facts a backend needs from it (dtype, device, stream).
struct PrefillBackendParams {
  int num_heads = 0;          // N, heads of this layer (per tensor-parallel shard)
  float scale = 0.f;          // softmax scale multiplying q·k (usually 1/sqrt(P+R)); dimensionless
  int kv_lora_rank = 0;       // L, elements (prefill attends in P+R / V, not in L)
  int qk_nope_head_dim = 0;   // P, elements
  int qk_rope_head_dim = 0;   // R, elements
  int v_head_dim = 0;         // V, elements
  DType dtype = DType::bf16;  // activation dtype of q, k, v, out
  RunContext context{};
};

class PrefillBackend {
 public:
  explicit PrefillBackend(const PrefillBackendParams& params) : params_(params) {}
  virtual ~PrefillBackend() = default;
  PrefillBackend(const PrefillBackend&) = delete;
  PrefillBackend& operator=(const PrefillBackend&) = delete;

  virtual std::string name() const = 0;
  const PrefillBackendParams& params() const { return params_; }
  void set_stream(Stream stream) { params_.context.stream = stream; }

  // The plan: called once per step with that step's prefill view before any
  // run*. The default keeps a pointer (the view must outlive the runs);
  // overrides may precompute schedules and must call this base version.
  virtual void prepare_metadata(const PrefillMetadata& metadata) { prefill_metadata_ = &metadata; }
  const PrefillMetadata* prefill_metadata() const { return prefill_metadata_; }

  // Causal attention of the new tokens among themselves, per request of the
  // prepared view (cu_seqlens_q == cu_seqlens_k == query_start_loc): token i
  // of a request that starts at row s attends to rows [s, i].
  //   q   [T, N, P+R]     k [T, N, P+R]     v [T, N, V]   (T = num_prefill_tokens),
  //                       activation dtype
  //   out [T, N, V]       written (activation dtype, or fp8_e4m3 with output_scale);
  //                       caller-allocated (the seeds' out=None is the caller's allocation)
  //   lse [N, T] f32      natural log; written when return_softmax_lse (must then be
  //                       defined), untouched and may be undefined otherwise
  //   output_scale        undefined, or a 1-element f32 tensor on the device:
  //                       out = fp8_e4m3(o / scale); only when supports_quant_output(),
  //                       else NotImplementedError
  virtual void run_prefill_new_tokens(const Tensor& q, const Tensor& k, const Tensor& v, bool return_softmax_lse,
                                      const Tensor& out, const Tensor& lse, const Tensor& output_scale = {}) = 0;

  // Non-causal attention of the new tokens against context chunk chunk_idx
  // (0 <= chunk_idx < chunks.num_chunks of the prepared view); key rows of
  // request p are [cu_seq_lens[chunk_idx][p], cu_seq_lens[chunk_idx][p+1]).
  //   q [T, N, P+R]   k [seq_tot[chunk_idx], N, P+R]   v [seq_tot[chunk_idx], N, V]
  //                   activation dtype
  //   out [T, N, V] activation dtype and lse [N, T] f32 natural log, both written
  //   (a request with no key rows in this chunk: out 0, lse -inf)
  virtual void run_prefill_context_chunk(int chunk_idx, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const Tensor& lse) = 0;

  // Whether run_prefill_new_tokens can write quantized output directly
  // (fused), skipping the post-quant pass (seed S0).
  virtual bool supports_quant_output(QuantKey /*key*/) const { return false; }

  // Whether this instance needs V zero-padded to the QK head dim (seed 002's
  // _pad_v: kernels that cannot take Dv != Dqk). When true, MlaAttention
  // passes v as [T, N, P+R] (columns [V, P+R) zero), out as [T, N, P+R] and
  // keeps only the first V columns; merges run on the padded width.
  virtual bool pads_v() const { return false; }

  // What runs inside this instance, in words, for logs and reports
  // (lattn/kernel_label.h): the kernels, their tile configuration and the
  // projection GEMM. Default: backend_kernel_label(name(), device, dtype).
  virtual std::string kernel_label() const;

 protected:
  PrefillBackendParams params_;
  const PrefillMetadata* prefill_metadata_ = nullptr;
};

// The seeds' _pad_v rule (docs/mla.md): V is padded unless the
// kernel is FlashAttention 3 on a compute capability 9.x device.
//   flash_attn_version  nullopt = no FlashAttention (padding needed)
inline bool mla_pad_v(std::optional<int> flash_attn_version, std::optional<DeviceCapability> capability) {
  return !flash_attn_version || !(*flash_attn_version == 3 && capability && capability->major == 9);
}

// The seeds' classmethods, as one shared, immutable object per backend: the
// registry (lattn/registry.h) hands out the same object to every caller, so
// every method must be const and thread-safe.
class PrefillBackendClass {
 public:
  virtual ~PrefillBackendClass() = default;

  virtual std::string name() const = 0;  // get_name(), e.g. "cpu"
  virtual std::vector<DType> supported_dtypes() const { return {DType::f16, DType::bf16}; }
  virtual std::vector<MLADimensions> supported_mla_dimensions() const { return {}; }  // empty = any (S0)
  virtual bool requires_r1_mla_dimensions() const { return false; }                   // (S1)
  // nullopt = the CPU (no compute capability).
  virtual bool supports_compute_capability(std::optional<DeviceCapability> /*capability*/) const { return true; }
  // Whether what the backend needs exists in this process (the seeds' "dependencies importable").
  virtual bool is_available() const { return true; }
  virtual bool supports_quant_output(QuantKey /*key*/) const { return false; }
  bool supports_dtype(DType dtype) const;  // dtype in supported_dtypes()

  // Ordered reasons why this backend cannot serve `config` on a device of
  // `capability` (nullopt = the CPU); empty = valid. Texts are the seeds' (docs/backends.md):
  //   "compute capability 8.0 not supported" (no capability: "compute capability none (cpu) not supported")
  //   "dtype torch.float32 not supported"
  //   "required dependencies not available"
  //   S1: "model does not have DeepSeek R1 MLA dimensions (qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)"
  //   S0: "Model does not have supported MLA dimensions (got ...; supported: ...)"
  virtual std::vector<std::string> validate_configuration(std::optional<DeviceCapability> capability,
                                                          const SelectorConfig& config) const;

  // A new instance for one layer. Throws ValueError for params it cannot
  // serve (naming the field), BackendUnavailableError when is_available() is false.
  virtual std::unique_ptr<PrefillBackend> create(const PrefillBackendParams& params) const = 0;
};

// ---------------------------------------------------------------------------
// Decode (absorbed, data-movement-friendly path): MQA over the latent cache
// with QK dim L+R ([ql_nope | q_pe] · [kv_c | k_pe]) and V = kv_c (dim L).

struct DecodeBackendParams {
  int num_heads = 0;                   // N, heads of this layer (per tensor-parallel shard)
  float scale = 0.f;                   // softmax scale (the same as prefill's: 1/sqrt(P+R) usually); dimensionless
  int kv_lora_rank = 0;                // L, elements
  int qk_rope_head_dim = 0;            // R, elements
  DType dtype = DType::bf16;           // activation dtype of ql_nope, q_pe, out
  DType kv_cache_dtype = DType::bf16;  // f16, bf16 or fp8_e4m3: the dtype of the caches passed to run
  RunContext context{};
};

class DecodeBackend {
 public:
  explicit DecodeBackend(const DecodeBackendParams& params) : params_(params) {}
  virtual ~DecodeBackend() = default;
  DecodeBackend(const DecodeBackend&) = delete;
  DecodeBackend& operator=(const DecodeBackend&) = delete;

  virtual std::string name() const = 0;
  const DecodeBackendParams& params() const { return params_; }
  void set_stream(Stream stream) { params_.context.stream = stream; }

  // The plan (e.g. a split-KV schedule), once per step, before run.
  virtual void prepare_metadata(const DecodeMetadata& metadata) { decode_metadata_ = &metadata; }
  const DecodeMetadata* decode_metadata() const { return decode_metadata_; }

  // Attention of the decode tokens over their requests' paged latent cache.
  // Query token j of request r (s_q = its query length) sits at position
  // seq_len - s_q + j and attends causally to keys [0, seq_len - s_q + j];
  // scores are scale * (ql_nope · kv_c + q_pe · k_pe), values are kv_c.
  //   ql_nope  [T, N, L]  activation dtype (q_nope · W_UK_T)   (T = num_decode_tokens)
  //   q_pe     [T, N, R]  activation dtype (roped)
  //   cache    the layer's latent cache [num_blocks, block_size, L+R] of
  //            kv_cache_dtype (fp8: dequantized value = stored * cache.scale)
  //   metadata the decode view this step was planned with (prepare_metadata)
  //   out      [T, N, L]  written, activation dtype (the latent output; the caller applies W_UV)
  //   lse      [N, T] f32 natural log, written when defined (may be undefined)
  virtual void run(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache, const DecodeMetadata& metadata,
                   const Tensor& out, const Tensor& lse) = 0;

  // What runs inside this instance, in words (lattn/kernel_label.h): the
  // kernel, its tile configuration and the split-KV plan that the last
  // prepare_metadata chose (CUDA plans depend on the step's batch shape).
  // Default: backend_kernel_label(name(), device, dtype).
  virtual std::string kernel_label() const;

 protected:
  DecodeBackendParams params_;
  const DecodeMetadata* decode_metadata_ = nullptr;
};

// The decode twin of PrefillBackendClass: one shared, immutable object per
// backend; every method const and thread-safe.
class DecodeBackendClass {
 public:
  virtual ~DecodeBackendClass() = default;

  virtual std::string name() const = 0;
  virtual std::vector<DType> supported_dtypes() const { return {DType::f16, DType::bf16}; }  // activations
  virtual std::vector<DType> supported_kv_cache_dtypes() const { return {DType::f16, DType::bf16, DType::fp8_e4m3}; }
  virtual std::vector<int> supported_block_sizes() const { return {}; }  // tokens per block; empty = any
  // Supported (kv_lora_rank, qk_rope_head_dim) pairs in elements; empty = any.
  virtual std::vector<std::pair<int, int>> supported_latent_dims() const { return {}; }
  // Largest decode query length s_q per request (> 1: speculative / MTP decodes).
  virtual int max_query_tokens_per_request() const { return 1 << 30; }
  virtual bool returns_lse() const { return true; }            // run writes lse when it is defined
  virtual bool supports_cuda_graphs() const { return false; }  // run may be captured and replayed
  // Whether a layer running this decode backend may write fp8 output with an
  // output_scale (MlaAttention requires it of both its backends).
  virtual bool supports_quant_output(QuantKey /*key*/) const { return false; }
  virtual bool supports_compute_capability(std::optional<DeviceCapability> /*capability*/) const { return true; }
  virtual bool is_available() const { return true; }
  bool supports_dtype(DType dtype) const;

  // Same style and texts as PrefillBackendClass::validate_configuration, plus
  // "kv cache dtype X not supported", "block size B not supported (supported: ...)",
  // "latent dims (L, R) not supported (supported: ...)",
  // "S query tokens per request not supported (max M)".
  virtual std::vector<std::string> validate_configuration(std::optional<DeviceCapability> capability,
                                                          const SelectorConfig& config) const;

  // A new instance for one layer (errors as PrefillBackendClass::create).
  virtual std::unique_ptr<DecodeBackend> create(const DecodeBackendParams& params) const = 0;
};

// Registers a built-in backend class at library load time: define one
// `static const RegisterPrefillBackend kReg{std::make_shared<MyClass>()};`
// in the backend's .cpp. Plug-ins and CUSTOM use lattn/registry.h instead.
struct RegisterPrefillBackend {
  explicit RegisterPrefillBackend(std::shared_ptr<const PrefillBackendClass> cls);
};
struct RegisterDecodeBackend {
  explicit RegisterDecodeBackend(std::shared_ptr<const DecodeBackendClass> cls);
};

}  // namespace lattn
