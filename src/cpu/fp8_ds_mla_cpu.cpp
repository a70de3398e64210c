// Host fp8_ds_mla cache ops (src/cpu/sparse_cpu.h): the cache write
// quantizes each token with the codec of src/core/sparse/fp8_ds_mla.cpp, gather
// dequantizes, and the sparse backend's row dequantizer (scalar version).
#include <cstring>
#include <vector>

#include "core/types/host_index.h"
#include "cpu/sparse_cpu.h"
#include "lattn/dtype.h"
#include "lattn/sparse.h"

namespace lattn::cpu {
namespace {

using detail::index_at;

uint8_t* entry_ptr(const LatentCache& cache, int64_t block, int64_t offset) {
  return static_cast<uint8_t*>(cache.data.data()) + block * cache.data.stride(0) + offset * cache.data.stride(1);
}

}  // namespace

void concat_and_cache_ds_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                             const Tensor& slot_mapping) {
  const int L = cache.kv_lora_rank, R = cache.qk_rope_head_dim;
  const int64_t block_size = cache.block_size();
  std::vector<float> latent(static_cast<size_t>(L)), rope(static_cast<size_t>(R));
  for (int64_t t = 0; t < slot_mapping.size(0); ++t) {
    const int64_t slot = index_at(slot_mapping, t);
    if (slot < 0) continue;  // PAD_SLOT_ID
    for (int i = 0; i < L; ++i) latent[size_t(i)] = load_as_f32(kv_c.data(), kv_c.dtype(), t * kv_c.stride(0) + i);
    for (int i = 0; i < R; ++i) rope[size_t(i)] = load_as_f32(k_pe.data(), k_pe.dtype(), t * k_pe.stride(0) + i);
    fp8_ds_mla_encode(latent.data(), rope.data(), L, R, entry_ptr(cache, slot / block_size, slot % block_size));
  }
}

void gather_cache_ds_mla(const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                         const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts) {
  const int L = cache.kv_lora_rank, R = cache.qk_rope_head_dim;
  const int64_t block_size = cache.block_size();
  std::vector<float> row(static_cast<size_t>(L + R));
  for (int b = 0; b < batch_size; ++b) {
    const int64_t row0 = index_at(cu_seq_lens, b), n = index_at(cu_seq_lens, b + 1) - row0;
    const int64_t first_block = seq_starts.defined() ? index_at(seq_starts, b) / block_size : 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t block = index_at(block_table, b, first_block + j / block_size);
      fp8_ds_mla_decode(entry_ptr(cache, block, j % block_size), L, R, row.data());
      char* d = static_cast<char*>(dst.data()) + (row0 + j) * dst.stride(0) * dst.element_size();
      for (int i = 0; i < L + R; ++i) store_from_f32(d, dst.dtype(), i, row[size_t(i)]);
    }
  }
}

void dequant_ds_mla_rows_bf16(const uint8_t* cache_base, const int64_t* row_offsets, int rows, int kv_lora_rank,
                              int rope_dim, uint16_t* out) {
  const int width = kv_lora_rank + rope_dim, tiles = kv_lora_rank / kFp8DsMlaTile;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* e = cache_base + row_offsets[r];
    uint16_t* o = out + int64_t(r) * width;
    for (int tile = 0; tile < tiles; ++tile) {
      float scale;
      std::memcpy(&scale, e + kv_lora_rank + 4 * tile, 4);
      for (int i = tile * kFp8DsMlaTile; i < (tile + 1) * kFp8DsMlaTile; ++i) {
        o[i] = f32_to_bf16(fp8e4m3_to_f32(e[i]) * scale);
      }
    }
    std::memcpy(o + kv_lora_rank, e + kv_lora_rank + 4 * tiles, size_t(rope_dim) * 2);  // bf16 already
  }
}

void dequant_ds_mla_rows_f32(const uint8_t* cache_base, const int64_t* row_offsets, int rows, int kv_lora_rank,
                             int rope_dim, float* out) {
  for (int r = 0; r < rows; ++r) {
    fp8_ds_mla_decode(cache_base + row_offsets[r], kv_lora_rank, rope_dim,
                      out + int64_t(r) * (kv_lora_rank + rope_dim));
  }
}

}  // namespace lattn::cpu
