// LatentCache validation and the owning cache.
#include "lattn/cache.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "core/sparse/sparse_internal.h"
#include "core/types/cache_checks.h"
#include "lattn/check.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "lattn/sparse.h"

namespace lattn {

void LatentCache::validate(const char* op) const {
  check_dim(op, "cache", data, 3);
  check_dtype_in(op, "cache", data, {DType::f16, DType::bf16, DType::fp8_e4m3, kFp8DsMla});
  check_arg(kv_lora_rank > 0 && qk_rope_head_dim > 0, op, "cache", "declare positive kv_lora_rank and qk_rope_head_dim",
            std::to_string(kv_lora_rank) + " and " + std::to_string(qk_rope_head_dim));
  if (is_fp8_ds_mla())
    validate_fp8_ds_mla_cache(*this, op);  // src/core/sparse/fp8_ds_mla.cpp
  else
    check_arg(data.size(2) == kv_lora_rank + qk_rope_head_dim, op, "cache",
              "have entry width kv_lora_rank + qk_rope_head_dim = " + std::to_string(kv_lora_rank + qk_rope_head_dim),
              std::to_string(data.size(2)) + " (shape " + data.shape_str() + ")");
  check_arg(data.size(1) >= 1, op, "cache", "have block size >= 1", std::to_string(data.size(1)));
  check_arg(data.stride(2) == 1 && data.stride(1) == data.size(2), op, "cache",
            "have contiguous entries within a block", data.describe());
  check_arg(std::isfinite(scale) && scale > 0.f, op, "cache.scale", "be finite and positive", std::to_string(scale));
}

std::vector<int> MlaCommonBackend::get_supported_head_sizes() { return mla_supported_head_sizes(); }

namespace {

// The block size as the spec's int, after the owning cache's own check.
int checked_block_size(int64_t num_blocks, int64_t block_size) {
  if (num_blocks < 0 || block_size < 1 || block_size > INT32_MAX) {
    throw ValueError("OwnedLatentCache: need num_blocks >= 0 and block_size in [1, " + std::to_string(INT32_MAX) +
                     "], got " + std::to_string(num_blocks) + " and " + std::to_string(block_size));
  }
  return int(block_size);
}

}  // namespace

OwnedLatentCache::OwnedLatentCache(int64_t num_blocks, int64_t block_size, const MlaDims& dims, DType dtype,
                                   Device device, float scale)
    : OwnedLatentCache(num_blocks,
                       KvCacheSpec{dims.kv_lora_rank, dims.qk_rope_head_dim, dtype,
                                   checked_block_size(num_blocks, block_size), scale},
                       device) {}

OwnedLatentCache::OwnedLatentCache(int64_t num_blocks, const KvCacheSpec& spec, Device device) {
  const int block_size = checked_block_size(num_blocks, spec.block_size);
  const int64_t width = spec.dtype == kFp8DsMla ? fp8_ds_mla_entry_bytes(spec.kv_lora_rank, spec.qk_rope_head_dim)
                                                : int64_t(spec.entry_dim());
  storage_ = OwnedTensor::empty({num_blocks, block_size, width}, spec.dtype, device);
  cache_ = LatentCache{storage_.tensor(), spec.kv_lora_rank, spec.qk_rope_head_dim, spec.scale};
  cache_.validate("OwnedLatentCache");
}

std::string KvCacheSpec::str() const {
  std::string s = "L=" + std::to_string(kv_lora_rank) + " R=" + std::to_string(qk_rope_head_dim) + " " +
                  (dtype == kFp8DsMla ? std::string("fp8_ds_mla") : std::string(dtype_name(dtype))) +
                  " block_size=" + std::to_string(block_size);
  if (dtype == DType::fp8_e4m3) s += " scale=" + std::to_string(scale);
  return s;
}

namespace detail {

void check_cache_matches(const char* op, const LatentCache& cache, const KvCacheSpec& expected, const char* whose,
                         bool check_block_size) {
  const auto str = [](int64_t v) { return std::to_string(v); };
  const auto dtype_str = [](DType t) {
    return t == kFp8DsMla ? std::string("fp8_ds_mla (u8)") : std::string(dtype_name(t));
  };
  check_arg(cache.dtype() == expected.dtype, op, "cache",
            "have dtype " + dtype_str(expected.dtype) + " (that of " + whose + ")", dtype_str(cache.dtype()));
  check_arg(cache.kv_lora_rank == expected.kv_lora_rank && cache.qk_rope_head_dim == expected.qk_rope_head_dim, op,
            "cache",
            "have latent dims (kv_lora_rank, qk_rope_head_dim) = (" + str(expected.kv_lora_rank) + ", " +
                str(expected.qk_rope_head_dim) + ") (those of " + whose + ")",
            "(" + str(cache.kv_lora_rank) + ", " + str(cache.qk_rope_head_dim) + ")");
  if (check_block_size) {
    check_arg(cache.block_size() == expected.block_size, op, "cache",
              "have block size " + str(expected.block_size) + " (that of " + whose + ")", str(cache.block_size()));
  }
}

}  // namespace detail
}  // namespace lattn
