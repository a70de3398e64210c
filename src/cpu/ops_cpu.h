// src/cpu/ops_cpu.h — host implementations of the cache and attention-state
// ops (lattn/ops.h) and of the small helpers MlaAttention::forward needs
// (internal). Arguments arrive validated by src/core/ops/ops.cpp or the forward:
// these functions only compute.
#pragma once

#include <cstdint>
#include <span>

#include "lattn/cache.h"
#include "lattn/tensor.h"

namespace lattn::cpu {

//   kv_c [T, L], k_pe [T, R] (already squeezed), slot_mapping [T'] int64 host
void concat_and_cache_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache, const Tensor& slot_mapping);

//   dst [>= total, L+R], block_table [>= B, max_blocks] i32, cu_seq_lens [B+1] i32,
//   seq_starts [B] i32 or undefined (all 0)
void gather_cache(const LatentCache& cache, const Tensor& dst, const Tensor& block_table, const Tensor& cu_seq_lens,
                  int batch_size, const Tensor& seq_starts);

//   out, prefix_out, suffix_out [T, N, D]; out_lse (may be undefined), prefix_lse, suffix_lse [N, T] f32
void merge_attn_states(const Tensor& out, const Tensor& out_lse, const Tensor& prefix_out, const Tensor& prefix_lse,
                       const Tensor& suffix_out, const Tensor& suffix_lse);

// Copies whole blocks (block_size * entry_dim elements) from block src to
// block dst for each (src, dst) pair; caches may be the same (copy_blocks) or
// two host caches of equal block shape (swap_blocks).
//   block_mapping [n, 2] int64 host
void copy_cache_blocks(const LatentCache& src, const LatentCache& dst, const Tensor& block_mapping);

// dst = fp8_e4m3(src / scale), elementwise.
//   src [rows, cols] f16/bf16/f32, dst [rows, cols] fp8_e4m3 (both last dim contiguous)
void quantize_fp8(const Tensor& src, const Tensor& dst, float scale);

}  // namespace lattn::cpu
