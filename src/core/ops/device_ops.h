// src/core/ops/device_ops.h — the one table through which the core reaches a
// device (internal). Each device kind implements it in its own folder:
//   cpu_device_ops()   src/cpu/device_ops_cpu.cpp
//   cuda_device_ops()  src/cuda/device_ops_cuda.cpp, or, in a build without
//                      CUDA, src/cuda/absent/device_ops_absent.cpp: a table
//                      whose every entry refuses and says why CUDA is absent.
// The core includes no backend header: it calls device_ops(device).entry(...).
//
// Arguments arrive validated by the core (src/core/ops/ops.cpp, the forward):
// shapes, dtypes, devices, and index values where they live on the host.
// Entries only compute; index values on a device are unchecked.
#pragma once

#include "core/ops/device_ops_types.h"
#include "lattn/backend.h"  // RunContext

namespace lattn::detail {

struct DeviceOps {
  const char* name = "";  // "cpu", "cuda"
  // nullptr when this build can run the device; otherwise one sentence saying
  // why not (every entry of such a table throws ValueError with it).
  const char* absent_reason = nullptr;

  // ---- memory (device = the ordinal within the kind; Stream nullptr = synchronous) ----
  void* (*malloc)(size_t bytes, int device) = nullptr;
  void (*free)(void* ptr, int device) noexcept = nullptr;
  // Copies between any two locations of which at most one is another kind's
  // (the host): the table of the non-host side is used.
  void (*memcpy)(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                 Stream stream) = nullptr;
  void (*memset)(void* ptr, int byte, size_t bytes, int device, Stream stream) = nullptr;
  // `rows` rows of `row_bytes` bytes, row i from src + i * src_pitch to dst +
  // i * dst_pitch (pitches in bytes), both on this device.
  void (*memcpy_2d)(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
                    int device, Stream stream) = nullptr;
  void (*synchronize)(Stream stream) = nullptr;
  // The devices of this kind (empty list plus the reason when there are none).
  CudaDeviceQuery (*query_devices)() = nullptr;

  // ---- cache and attention-state ops (lattn/ops.h) ----
  //   kv_c [T, L], k_pe [T, R] (squeezed), slot_mapping [T'] int64
  void (*concat_and_cache_mla)(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                               const Tensor& slot_mapping, Stream stream) = nullptr;
  //   dst [>= total, L+R], block_table [>= B, max_blocks] i32, cu_seq_lens [B+1] i32,
  //   seq_starts [B] i32 or undefined (all 0)
  void (*gather_cache)(const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                       const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts, Stream stream) = nullptr;
  //   out, prefix_out, suffix_out [T, N, D]; out_lse (may be undefined), prefix_lse, suffix_lse [N, T] f32
  void (*merge_attn_states)(const Tensor& out, const Tensor& out_lse, const Tensor& prefix_out,
                            const Tensor& prefix_lse, const Tensor& suffix_out, const Tensor& suffix_lse,
                            Stream stream) = nullptr;
  // Whole blocks (src, dst) of block_mapping [n, 2] int64 host, within each cache.
  void (*copy_blocks)(std::span<const LatentCache> caches, const Tensor& block_mapping, Stream stream) = nullptr;
  // Whole blocks from src to dst (two caches of one block shape; one of them
  // may be on the host when this is a device table).
  void (*swap_blocks)(const LatentCache& src, const LatentCache& dst, const Tensor& block_mapping,
                      Stream stream) = nullptr;
  // vLLM's advance_step_flashattn on this device's tensors (docs/metadata.md):
  //   input_tokens, input_positions, slot_mapping [num_seqs] int32/int64,
  //   sampled_token_ids [num_queries(, 1)], seq_lens [num_seqs], block_tables [num_seqs, max_blocks] int32.
  void (*advance_step)(int num_seqs, int num_queries, int block_size, const Tensor& input_tokens,
                       const Tensor& sampled_token_ids, const Tensor& input_positions, const Tensor& seq_lens,
                       const Tensor& slot_mapping, const Tensor& block_tables, Stream stream) = nullptr;
  // The same two for an fp8_ds_mla cache (per-tile scales, lattn/sparse.h).
  void (*concat_and_cache_ds_mla)(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                                  const Tensor& slot_mapping, Stream stream) = nullptr;
  void (*gather_cache_ds_mla)(const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                              const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts,
                              Stream stream) = nullptr;
  //   src [rows, cols] f16/bf16/f32, dst [rows, cols] fp8_e4m3 (last dims contiguous),
  //   scale [1] f32 on this device;  dst = fp8(src / scale[0])
  void (*quantize_fp8)(const Tensor& src, const Tensor& dst, const Tensor& scale, Stream stream) = nullptr;

  // ---- sparse MLA and the lightning indexer (lattn/sparse.h) ----
  // Sparse absorbed attention (the `cuda` sparse class; the host classes
  // compute themselves): q [T, N, L+R] bf16, indices [T, topk] i32, out [T, N, L].
  void (*sparse_mla)(const SparseMlaArgs& args, const LatentCache& cache, Stream stream) = nullptr;
  // k [T, D], slot_mapping [T'] int64: the key of token t, quantized per token, to slot_mapping[t] (< 0 skipped).
  void (*indexer_k_cache_write)(const Tensor& k, const IndexerKeyCache& cache, const Tensor& slot_mapping,
                                Stream stream) = nullptr;
  // logits [T, >= max_seq_len] f32: every visible position's logit, -inf past the token's own.
  // reference: fp64 math (host tables only).
  void (*indexer_logits)(const IndexerArgs& args, const IndexerKeyCache& cache, const Tensor& logits,
                         bool reference) = nullptr;
  // topk_indices [T, topk] i32 slots (-1 padded), order of lattn/sparse.h.
  void (*indexer_topk)(const IndexerArgs& args, const IndexerKeyCache& cache, const Tensor& topk_indices,
                       bool reference) = nullptr;
  // logits [T, S] f32, lengths [T] i32 (<= S), out [T, topk] i32 positions.
  void (*topk_positions)(const Tensor& logits, const Tensor& lengths, const Tensor& out, Stream stream) = nullptr;

  // ---- projections (core/ops/gemm.h) ----
  void (*gemm)(const GemmProblem& p, const RunContext& ctx) = nullptr;
};

// Defined by the cpu folder and by the cuda folder (or its no-CUDA stand-in).
const DeviceOps& cpu_device_ops();
const DeviceOps& cuda_device_ops();

// The table of a device's kind.
inline const DeviceOps& device_ops(Device device) { return device.is_cuda() ? cuda_device_ops() : cpu_device_ops(); }
// The table for work between two devices: the non-host side's.
inline const DeviceOps& device_ops(Device a, Device b) { return device_ops(a.is_cuda() ? a : b); }

}  // namespace lattn::detail
