// src/cuda/smxx/cache_write_params.h — what both latent-cache writes
// (concat_and_cache_mla.cu: a plain row copy; fp8_ds_mla_cache.cu: per-tile
// fp8 quantization) read of their arguments: the new tokens' rows, their
// slots and the cache's shape. Each write's parameter struct extends it.
#pragma once

#include <cstdint>

#include "lattn/cache.h"
#include "lattn/tensor.h"

namespace lattn::cuda {

struct CacheWriteParams {
  const void* kv_c;      // [T, L], row stride kv_c_stride (elements)
  const void* k_pe;      // [T, R], row stride k_pe_stride
  void* cache;           // [num_blocks, block_size, entry], block stride block_stride
  const int64_t* slots;  // [num_tokens], stride slot_stride
  int64_t kv_c_stride, k_pe_stride, slot_stride;
  int64_t block_stride;           // cache elements between blocks (>= block_size * the entry's)
  int64_t block_size, num_slots;  // num_slots = num_blocks * block_size
  int num_tokens, L, R;
};

// The fields above for writing kv_c / k_pe rows to slot_mapping's slots of
// `cache` (arguments validated by the core).
inline CacheWriteParams cache_write_params(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                                           const Tensor& slot_mapping) {
  CacheWriteParams p{};
  p.kv_c = kv_c.data();
  p.k_pe = k_pe.data();
  p.cache = cache.data.data();
  p.slots = slot_mapping.data_as<const int64_t>();
  p.kv_c_stride = kv_c.stride(0);
  p.k_pe_stride = k_pe.stride(0);
  p.slot_stride = slot_mapping.stride(0);
  p.block_stride = cache.data.stride(0);
  p.block_size = cache.block_size();
  p.num_slots = cache.num_blocks() * cache.block_size();
  p.num_tokens = int(slot_mapping.size(0));
  p.L = cache.kv_lora_rank;
  p.R = cache.qk_rope_head_dim;
  return p;
}

}  // namespace lattn::cuda
