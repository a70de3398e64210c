// lattn/sparse.h — sparse MLA (DeepSeek-V3.2's DSA): the fp8_ds_mla latent
// cache format, sparse absorbed attention over given cache slots, and the
// lightning indexer (its key cache, logits and causal top-k).
// docs/sparse.md describes the algorithm and every contract below.
//
// Notation: T tokens, N attention heads, L = kv_lora_rank, R = qk_rope_head_dim
// (a latent entry is [kv_c (L) | k_pe (R)], 576 wide for DeepSeek), H indexer
// heads, D indexer head dim. A *slot* is a global cache position
// block * block_size + offset, as in a slot mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lattn/cache.h"
#include "lattn/device.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn {

// ---------------------------------------------------------------------------
// The fp8_ds_mla latent format (656 bytes per DeepSeek token). One entry:
//   bytes [0, L)                      kv_c as fp8 e4m3, tile i = elements [128 i, 128 i + 128)
//   bytes [L, L + 4 L/128)            one f32 scale per tile: max(amax_i / 448, FLT_MIN)
//   bytes [L + 4 L/128, + 2 R)        k_pe as bf16 (not quantized)
// A LatentCache whose data has dtype u8 (kFp8DsMla) and entry width
// fp8_ds_mla_entry_bytes(L, R) holds this format (vLLM's "fp8_ds_mla": its
// cache tensor is uint8 too). docs/mla.md gives the layout byte by byte.

constexpr DType kFp8DsMla = DType::u8;  // the cache dtype that means fp8_ds_mla
constexpr int kFp8DsMlaTile = 128;      // latent elements per scale
constexpr float kFp8E4m3Max = 448.f;    // largest finite e4m3 value

constexpr int64_t fp8_ds_mla_entry_bytes(int64_t kv_lora_rank, int64_t qk_rope_head_dim) {
  return kv_lora_rank + 4 * (kv_lora_rank / kFp8DsMlaTile) + 2 * qk_rope_head_dim;
}

// Encodes one entry from f32 values: latent [L], rope [R] -> entry [bytes].
// amax ignores NaN and ±inf (NaN stays NaN, ±inf saturates to ±448·scale).
void fp8_ds_mla_encode(const float* latent, const float* rope, int kv_lora_rank, int qk_rope_head_dim, uint8_t* entry);
// Decodes one entry to f32 [L + R]: latent = fp8 · tile scale, rope = bf16.
void fp8_ds_mla_decode(const uint8_t* entry, int kv_lora_rank, int qk_rope_head_dim, float* out);
// The same in fp64 (exact: an fp8 value times an f32 scale fits a double).
void fp8_ds_mla_decode_f64(const uint8_t* entry, int kv_lora_rank, int qk_rope_head_dim, double* out);

// ---------------------------------------------------------------------------
// Sparse absorbed MLA over given slots.
//
// For token t and head h, over the valid entries j of indices[t] (>= 0; -1
// means no key, and so does every entry when the row is all -1):
//   s_j = scale · q[t, h] · cache[indices[t, j]]      (QK over all L+R)
//   out[t, h] = Σ_j softmax(s)_j · cache[indices[t, j]][0:L]
//   lse[h, t] = log Σ_j exp(s_j)                      (natural log; -inf when no valid entry, out 0)
// A slot listed twice counts twice (as a key repeated in the sequence).
// With attn_sink [N] f32: out[t, h] *= exp(lse) / (exp(lse) + exp(sink[h]))
// (lse itself is reported without the sink).
struct SparseMlaArgs {
  Tensor q;           // [T, N, L+R] f32/f16/bf16 (absorbed: [q_nope·W_UK | q_pe]), last dim contiguous
  Tensor indices;     // [T, topk] int32 slots in [-1, num_blocks·block_size), last dim contiguous
  Tensor attn_sink;   // [N] f32, or undefined
  Tensor out;         // [T, N, L] q's dtype, written; last dim contiguous
  Tensor lse;         // [N, T] f32, written when defined
  float scale = 0.f;  // softmax scale (> 0)
};

// What the sparse selector knows about a call.
struct SparseSelectorConfig {
  DType dtype = DType::bf16;           // activation dtype of q / out
  DType kv_cache_dtype = DType::bf16;  // f16, bf16, fp8_e4m3 or kFp8DsMla
  int num_heads = 0;
  int kv_lora_rank = 512;
  int qk_rope_head_dim = 64;
  int topk = 2048;
  Device device = Device::cpu();
  std::string backend;  // "" = LATTN_SPARSE_MLA_BACKEND, then automatic
  // "SparseMlaSelectorConfig(dtype=torch.bfloat16, kv_cache_dtype=fp8_ds_mla, num_heads=16, ...)"
  std::string repr() const;
};

// A sparse attention backend: stateless, one shared object per name; run
// may be called from several threads. Serves decode and prefill alike (the
// indices already say which keys each token sees).
class SparseMlaBackendClass {
 public:
  virtual ~SparseMlaBackendClass() = default;
  virtual std::string name() const = 0;
  // Reasons this backend cannot serve `config` on `capability` (nullopt =
  // the CPU); empty = valid. Texts as the dense backends' (docs/backends.md),
  // e.g. "kv cache dtype fp8_ds_mla not supported".
  virtual std::vector<std::string> validate_configuration(std::optional<DeviceCapability> capability,
                                                          const SparseSelectorConfig& config) const = 0;
  // Runs on validated arguments (sparse_mla checks them first).
  virtual void run(const SparseMlaArgs& args, const LatentCache& cache, Stream stream) const = 0;
};

// Built-in classes register themselves at load time.
struct RegisterSparseMlaBackend {
  explicit RegisterSparseMlaBackend(std::shared_ptr<const SparseMlaBackendClass> cls);
};
// Registers (or replaces, by name) a class in this process.
void register_sparse_mla_backend(std::shared_ptr<const SparseMlaBackendClass> cls);
// Names in priority order: "cuda", "cpu", "reference" (plus any registered).
std::vector<std::string> sparse_mla_backend_names();

// Picks the backend: an explicit choice (config.backend, else the environment
// variable LATTN_SPARSE_MLA_BACKEND) is validated and never replaced;
// otherwise the device's priority list (CUDA: cuda, reference; CPU: cpu,
// reference) gives the first valid one. ValueError listing every reason.
std::shared_ptr<const SparseMlaBackendClass> get_sparse_mla_backend(const SparseSelectorConfig& config);
// Every backend's reasons for `config` (empty = valid), in priority order.
std::vector<std::pair<std::string, std::vector<std::string>>> explain_sparse_mla_backends(
    const SparseSelectorConfig& config);

// The op: validates every argument (shapes, dtypes, devices, and for host
// indices every value) before writing anything, then runs `backend` ("" =
// the selector's choice). Throws ValueError naming the argument.
void sparse_mla(const SparseMlaArgs& args, const LatentCache& cache, const std::string& backend = "",
                Stream stream = nullptr);

// ---------------------------------------------------------------------------
// The lightning indexer.
//
// Its key cache holds one D-wide key per token, paged like the latent cache:
// data u8 [num_blocks, block_size, D + 4], an entry = D fp8 e4m3 values then
// one f32 scale (max(amax / 448, FLT_MIN)); key = fp8 · scale.
struct IndexerKeyCache {
  Tensor data;       // [num_blocks, block_size, head_dim + 4] u8
  int head_dim = 0;  // D (128 for DeepSeek-V3.2)

  int64_t num_blocks() const { return data.size(0); }
  int64_t block_size() const { return data.size(1); }
  Device device() const { return data.device(); }
  void validate(const char* op) const;
};

class OwnedIndexerKeyCache {
 public:
  OwnedIndexerKeyCache() = default;
  OwnedIndexerKeyCache(int64_t num_blocks, int64_t block_size, int head_dim, Device device = Device::cpu());
  const IndexerKeyCache& cache() const { return cache_; }
  operator const IndexerKeyCache&() const { return cache_; }

 private:
  OwnedTensor storage_;
  IndexerKeyCache cache_;
};

// Writes key k[t] (quantized per token) to slot slot_mapping[t]; slots < 0 skipped.
//   k [T, D] f32/f16/bf16 (last dim contiguous), slot_mapping [T'] int64, T' <= T
void indexer_k_cache_write(const Tensor& k, const IndexerKeyCache& cache, const Tensor& slot_mapping,
                           Stream stream = nullptr);

// Which tokens see which positions: request r owns tokens
// [query_start_loc[r], query_start_loc[r+1]); its token j sits at position
// seq_lens[r] - q_len + j and sees positions [0, that position] (causal),
// position p living at slot block_table[r, p / block_size] · block_size + p % block_size.
//
// The index arrays live on the host (their values are checked) or, for a
// CUDA indexer, on q's device (unchecked: the kernels treat a block id
// outside the cache as no key); then max_seq_len must be given.
struct IndexerArgs {
  Tensor q;                 // [T, H, D] f32/f16/bf16
  Tensor weights;           // [T, H] f32 (per-token head weights, softmax scale folded in)
  Tensor block_table;       // [B, max_blocks] int32
  Tensor query_start_loc;   // [B + 1] int32, ends at T
  Tensor seq_lens;          // [B] int32, >= the request's query length
  int max_seq_len = 0;      // >= every seq_lens value; 0 = read from host seq_lens
  Stream stream = nullptr;  // CUDA work is enqueued here
};

// logits[t, p] = Σ_h weights[t, h] · relu(q[t, h] · key(p)) for visible p,
// -inf for p past the token's position. logits [T, >= max seq_len] f32 (host).
void indexer_logits(const IndexerArgs& args, const IndexerKeyCache& cache, const Tensor& logits,
                    const std::string& backend = "");

// The top-k of the logits per token, as slots: topk_indices [T, topk] int32
// (host), sorted by logit descending, ties to the lower position, NaN logits
// last; -1 past the token's visible positions. backend "reference" (fp64),
// "cpu" or "" (cpu).
void indexer_topk(const IndexerArgs& args, const IndexerKeyCache& cache, const Tensor& topk_indices,
                  const std::string& backend = "");

// The top-k step alone, on given logits [T, S] f32 with per-token visible
// lengths lengths[t] (host int32): out [T, topk] int32 positions (not slots),
// same order rules. Exposed for benchmarks and tests.
void topk_positions(const Tensor& logits, const Tensor& lengths, const Tensor& out);

}  // namespace lattn
