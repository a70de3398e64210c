// lattn/kv_cache_spec.h — what a layer, a decode plan and a cache must agree
// on about a paged latent cache, in one value: the latent dims of an entry,
// its dtype, the block size and the fp8 scale.
//
// The configuration structs that name these facts field by field
// (MlaAttentionConfig, SelectorConfig, MetadataBuilderConfig,
// MlaCommonStateConfig) keep their fields, take them from one KvCacheSpec
// through set_kv_cache_spec() and, where they hold all of them, say them as
// one through kv_cache_spec(); a cache says its own through
// LatentCache::spec(). Code that compares a cache with what was configured
// compares the two specs (lattn/cache.h). docs/metadata.md, "One
// KvCacheSpec", says who holds what.
#pragma once

#include <string>

#include "lattn/dtype.h"

namespace lattn {

struct KvCacheSpec {
  int kv_lora_rank = 512;     // L, latent elements per token
  int qk_rope_head_dim = 64;  // R, rope elements per token
  // f16, bf16, fp8_e4m3 (stored = fp8(x / scale)), or u8 = kFp8DsMla
  // (DeepSeek-V3.2's 656-byte entries, lattn/sparse.h).
  DType dtype = DType::bf16;
  int block_size = 16;  // tokens per block, >= 1
  float scale = 1.0f;   // fp8_e4m3 only: dequantized value = stored * scale

  // Elements of one entry [kv_c (L) | k_pe (R)] (576 for DeepSeek); an
  // fp8_ds_mla entry is fp8_ds_mla_entry_bytes(L, R) bytes instead.
  int entry_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  // "L=512 R=64 bf16 block_size=16" (and " scale=0.05" for fp8_e4m3).
  std::string str() const;
  friend bool operator==(const KvCacheSpec&, const KvCacheSpec&) = default;
};

}  // namespace lattn
