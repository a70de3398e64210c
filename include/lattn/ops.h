// lattn/ops.h — the cache and attention-state operations, with the seeds'
// names (vLLM's ops.*). Each dispatches on the device of its tensors: host
// implementations in src/cpu, CUDA ones in src/cuda/smxx.
//
// Every op validates all arguments before touching memory: on a ValueError
// nothing has been written (no half-written cache).
#pragma once

#include <span>

#include "lattn/cache.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn {

// Writes token t's [kv_c[t] | k_pe[t]] to cache slot slot_mapping[t] for
// t < slot_mapping.size(0) (which may be < kv_c.size(0): CUDA-graph padding);
// slots < 0 (PAD_SLOT_ID) are skipped. fp8 caches store fp8(x / cache.scale)
// (saturating at ±448); f16/bf16 caches store x rounded to their dtype.
//   kv_c         [T, L]   f16/bf16/f32, rows may be strided
//   k_pe         [T, R] or [T, 1, R], same dtype as kv_c
//   slot_mapping [T'] int64, T' <= T, every slot < num_blocks * block_size
//                (checked when slot_mapping is on the host: a bad slot
//                raises ValueError before anything is written; on the device
//                the kernel skips it and the ValueError follows at the next
//                CUDA op, or right away with LATTN_CHECK_INDICES=1)
void concat_and_cache_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache, const Tensor& slot_mapping,
                          Stream stream = nullptr);

// Gathers context tokens into a contiguous workspace, converting to dst's
// dtype (fp8 entries are dequantized: stored * cache.scale; f16/bf16 entries
// are copied bit for bit when dst has the cache dtype):
// for b < batch_size, token j < cu_seq_lens[b+1]-cu_seq_lens[b] comes from
// block_table[b, seq_starts[b]/block_size + j/block_size] at offset
// j % block_size and lands in dst row cu_seq_lens[b] + j. seq_starts must be
// multiples of block_size (ValueError otherwise). Rows of dst past
// cu_seq_lens[batch_size] are untouched. The index values (alignment, block
// ids within the cache and the table) are checked when the index tensors
// live on the host. Device-resident indices are checked by the kernel: an id
// outside the cache (or the table) is skipped, nothing outside the cache is
// read, and the violation raises ValueError at the next CUDA op on the device,
// or right away with LATTN_CHECK_INDICES=1 (docs/reliability.md).
//   dst          [>= cu_seq_lens[batch_size], L+R]  f16/bf16/f32, rows may be strided
//   block_table  [>= batch_size, max_blocks] int32
//   cu_seq_lens  [batch_size + 1] int32
//   seq_starts   [batch_size] int32 (may be undefined: all 0)
void gather_cache(const LatentCache& cache, const Tensor& dst, const Tensor& block_table, const Tensor& cu_seq_lens,
                  int batch_size, const Tensor& seq_starts, Stream stream = nullptr);

// Merges two partial attention results by their LSE (arXiv:2501.01005 §2.2):
//   out = prefix_out * e^p / (e^p + e^s) + suffix_out * e^s / (e^p + e^s)
// Robust: +inf LSE is read as -inf (FA2's empty row); a side with -inf
// contributes nothing; both -inf gives out 0 and out_lse -inf.
//   out, prefix_out, suffix_out  [T, N, D]  f16/bf16/f32; out may alias an input (elementwise)
//   out_lse (optional), prefix_lse, suffix_lse  [N, T] f32 (natural log); out_lse must not alias
void merge_attn_states(const Tensor& out, const Tensor& out_lse, const Tensor& prefix_out, const Tensor& prefix_lse,
                       const Tensor& suffix_out, const Tensor& suffix_lse, Stream stream = nullptr);

// Copies whole blocks within each cache: block_mapping [n, 2] int64 on the
// host, rows (src, dst). The seeds' copy_blocks_mla.
void copy_blocks(std::span<const LatentCache> caches, const Tensor& block_mapping, Stream stream = nullptr);

// Copies whole blocks from src to dst (host<->host, host<->device,
// device<->device on the same GPU). block_mapping [n, 2] int64 on the host.
void swap_blocks(const LatentCache& src, const LatentCache& dst, const Tensor& block_mapping, Stream stream = nullptr);

}  // namespace lattn
