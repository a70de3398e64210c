// lattn/cache.h — the paged latent KV cache.
//
// One cache per attention layer: [num_blocks, block_size, L + R], one entry
// per token = [kv_c (L) | k_pe (R)] (seed 002: MLA caches one latent vector
// per token, num_kv_heads is 1). Slot s lives at block s / block_size,
// offset s % block_size. Any block size >= 1.
//
// dtype f16/bf16: entries are stored as the activations are (vLLM "auto").
// dtype fp8_e4m3 (vLLM "fp8"): stored = fp8(x / scale), read = fp8 * scale,
// with one per-tensor scale (vLLM's layer._k_scale).
// dtype u8 (vLLM "fp8_ds_mla", DeepSeek-V3.2): each entry is 656 bytes of
// fp8 latent, per-128 tile f32 scales and bf16 rope (lattn/sparse.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattn/config.h"
#include "lattn/kv_cache_spec.h"
#include "lattn/tensor.h"

namespace lattn {

struct LatentCache {
  Tensor data;               // [num_blocks, block_size, kv_lora_rank + qk_rope_head_dim]
  int kv_lora_rank = 0;      // L
  int qk_rope_head_dim = 0;  // R
  float scale = 1.0f;        // fp8 only: dequantized value = stored * scale

  int64_t num_blocks() const { return data.size(0); }
  int64_t block_size() const { return data.size(1); }
  int64_t entry_dim() const { return data.size(2); }
  DType dtype() const { return data.dtype(); }
  Device device() const { return data.device(); }
  bool is_fp8() const { return data.dtype() == DType::fp8_e4m3; }
  // fp8_ds_mla: entry_dim() is then bytes, not elements (lattn/sparse.h).
  bool is_fp8_ds_mla() const { return data.dtype() == DType::u8; }

  // {L, R, dtype, block size, scale} of this cache.
  KvCacheSpec spec() const { return {kv_lora_rank, qk_rope_head_dim, dtype(), int(block_size()), scale}; }

  // Throws ValueError when data is not [*, *, L+R] of f16/bf16/fp8_e4m3 (or
  // u8 [*, *, fp8_ds_mla_entry_bytes(L, R)] with L a multiple of 128) with
  // contiguous entries, or scale is not finite and positive.
  void validate(const char* op) const;
};

// get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size)
// = (num_blocks, block_size, head_size); num_kv_heads is ignored (1 for MLA).
struct KvCacheShape {
  int64_t num_blocks, block_size, head_size;
};
inline KvCacheShape get_kv_cache_shape(int64_t num_blocks, int64_t block_size, int64_t /*num_kv_heads*/,
                                       int64_t head_size) {
  return {num_blocks, block_size, head_size};
}

// The seeds' MLACommonBackend class facts (docs/mla.md), kept for
// parity with code written against vLLM. They describe the seed backend,
// which only accepted DeepSeek's 576-wide entries; lattn's own cache and
// MlaAttention accept any kv_lora_rank + qk_rope_head_dim.
struct MlaCommonBackend {
  static std::string get_name() { return "TRITON_MLA"; }
  static std::vector<int> get_supported_head_sizes();  // = mla_supported_head_sizes() (lattn/metadata.h)
  static KvCacheShape get_kv_cache_shape(int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                                         int64_t head_size) {
    return lattn::get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size);
  }
};

// An owning latent cache (allocates [num_blocks, block_size, L+R]).
class OwnedLatentCache {
 public:
  OwnedLatentCache() = default;
  OwnedLatentCache(int64_t num_blocks, int64_t block_size, const MlaDims& dims, DType dtype,
                   Device device = Device::cpu(), float scale = 1.0f);
  OwnedLatentCache(int64_t num_blocks, const KvCacheSpec& spec, Device device = Device::cpu());
  const LatentCache& cache() const { return cache_; }
  operator const LatentCache&() const { return cache_; }

 private:
  OwnedTensor storage_;
  LatentCache cache_;
};

}  // namespace lattn
