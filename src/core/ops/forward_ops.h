// src/core/ops/forward_ops.h — the small device-dispatched data movements
// MlaAttention::forward needs besides GEMMs and attention, and the public
// ops without their checks (internal), through the device-ops table
// (core/ops/device_ops.h).
#pragma once

#include "lattn/cache.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn::detail {

// Writes k_pe into the rope columns of every head of k (the seed's
// k_pe.expand over heads): k[t, n, P:P+R] = k_pe[t, :].
//   k_pe [T, R]       rows may be strided, last dim contiguous
//   k    [T, N, P+R]  contiguous, same dtype as k_pe
void broadcast_k_pe(const Tensor& k_pe, const Tensor& k, Stream stream);

// Copies the first dst.size(-1) columns of each row: dst[t, n, :V] = src[t, n, :V].
//   src [T, N, Dsrc >= V] (last dim contiguous)   dst [T, N, V] (last dim contiguous), same dtype
void copy_leading_columns(const Tensor& src, const Tensor& dst, Stream stream);

// dst = fp8_e4m3(src / scale[0]).
//   src [rows, cols] f16/bf16/f32   dst [rows, cols] fp8_e4m3   scale [1] f32 (same device)
void quantize_fp8(const Tensor& src, const Tensor& dst, const Tensor& scale, Stream stream);

// Sets every element of a 2-dim tensor (rows may be strided) to zero.
void zero_rows(const Tensor& t, Stream stream);

// The public cache and attention-state ops (lattn/ops.h) without their
// argument checks: for MlaAttention::forward, which validated the step once
// at its boundary (shapes, devices, every slot, the chunk plan's block ids
// and page-aligned starts) and must not re-read the index arrays inside its
// chunk loop. Arguments as the public ops', with k_pe already [T, R].
void concat_and_cache_mla_unchecked(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                                    const Tensor& slot_mapping, Stream stream);
void gather_cache_unchecked(const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                            const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts, Stream stream);
void merge_attn_states_unchecked(const Tensor& out, const Tensor& out_lse, const Tensor& prefix_out,
                                 const Tensor& prefix_lse, const Tensor& suffix_out, const Tensor& suffix_lse,
                                 Stream stream);

}  // namespace lattn::detail
