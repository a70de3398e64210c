// LatentCache validation and the owning cache.
#include "lattn/cache.h"

#include <cmath>

#include "core/sparse/sparse_internal.h"
#include "lattn/check.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "lattn/sparse.h"

namespace lattn {

void LatentCache::validate(const char* op) const {
  check_dim(op, "cache", data, 3);
  check_dtype_in(op, "cache", data, {DType::f16, DType::bf16, DType::fp8_e4m3, kFp8DsMla});
  check_arg(kv_lora_rank > 0 && qk_rope_head_dim > 0, op, "cache",
            "declare positive kv_lora_rank and qk_rope_head_dim",
            std::to_string(kv_lora_rank) + " and " + std::to_string(qk_rope_head_dim));
  if (is_fp8_ds_mla()) validate_fp8_ds_mla_cache(*this, op);  // src/core/sparse/fp8_ds_mla.cpp
  else check_arg(data.size(2) == kv_lora_rank + qk_rope_head_dim, op, "cache",
            "have entry width kv_lora_rank + qk_rope_head_dim = " + std::to_string(kv_lora_rank + qk_rope_head_dim),
            std::to_string(data.size(2)) + " (shape " + data.shape_str() + ")");
  check_arg(data.size(1) >= 1, op, "cache", "have block size >= 1", std::to_string(data.size(1)));
  check_arg(data.stride(2) == 1 && data.stride(1) == data.size(2), op, "cache",
            "have contiguous entries within a block", data.describe());
  check_arg(std::isfinite(scale) && scale > 0.f, op, "cache.scale", "be finite and positive", std::to_string(scale));
}

std::vector<int> MlaCommonBackend::get_supported_head_sizes() { return mla_supported_head_sizes(); }

OwnedLatentCache::OwnedLatentCache(int64_t num_blocks, int64_t block_size, const MlaDims& dims, DType dtype,
                                   Device device, float scale) {
  if (num_blocks < 0 || block_size < 1) {
    throw ValueError("OwnedLatentCache: need num_blocks >= 0 and block_size >= 1, got " + std::to_string(num_blocks) +
                     " and " + std::to_string(block_size));
  }
  const int64_t width = dtype == kFp8DsMla ? fp8_ds_mla_entry_bytes(dims.kv_lora_rank, dims.qk_rope_head_dim)
                                           : int64_t(dims.cache_entry_dim());
  storage_ = OwnedTensor::empty({num_blocks, block_size, width}, dtype, device);
  cache_ = LatentCache{storage_.tensor(), dims.kv_lora_rank, dims.qk_rope_head_dim, scale};
  cache_.validate("OwnedLatentCache");
}

}  // namespace lattn
