// src/cpu/sparse_cpu.h — host implementations of the fp8_ds_mla cache ops
// and the helpers of the `cpu` sparse backend and indexer (internal).
// Arguments arrive validated (src/core/ops/ops.cpp, src/core/sparse/).
#pragma once

#include <cstdint>

#include "lattn/cache.h"
#include "lattn/tensor.h"

namespace lattn::cpu {

// concat_and_cache_mla into an fp8_ds_mla cache (one tile scale per 128 latent elements).
//   kv_c [T, L], k_pe [T, R] (squeezed), slot_mapping [T'] int64 host
void concat_and_cache_ds_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                             const Tensor& slot_mapping);

// gather_cache from an fp8_ds_mla cache, dequantized into dst's dtype.
//   dst [>= total, L+R], block_table [>= B, max_blocks] i32, cu_seq_lens [B+1] i32, seq_starts [B] or undefined
void gather_cache_ds_mla(const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                         const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts);

// Dequantizes `rows` fp8_ds_mla entries into bf16 rows [L + R]:
// entries[i] = cache_base + row_offsets[i] bytes, out row i at out + i * (L + R).
// The AVX-512 version needs cpu_isa() >= avx512; both give identical bits.
void dequant_ds_mla_rows_bf16(const uint8_t* cache_base, const int64_t* row_offsets, int rows, int kv_lora_rank,
                              int rope_dim, uint16_t* out);
void dequant_ds_mla_rows_bf16_avx512(const uint8_t* cache_base, const int64_t* row_offsets, int rows, int kv_lora_rank,
                                     int rope_dim, uint16_t* out);

// The same into f32 rows (exact products: used for f32/f16 queries, whose
// error model bf16 rows would break).
void dequant_ds_mla_rows_f32(const uint8_t* cache_base, const int64_t* row_offsets, int rows, int kv_lora_rank,
                             int rope_dim, float* out);

}  // namespace lattn::cpu
