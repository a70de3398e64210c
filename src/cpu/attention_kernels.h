// src/cpu/attention_kernels.h — what the `cpu` backends (baseline x86-64,
// OpenMP) hand to the per-instruction-set attention kernels (internal).
//
// The backends plan and parallelize; a kernel runs one job on one thread:
//  * PrefillTileJob: up to prefill_tile_rows query rows of one (request,
//    head) against that request's keys, flash-style (online softmax over
//    key tiles, nothing of size S x S is ever stored);
//  * DecodeSplitJob: every query row of one request (all heads, all s_q
//    tokens) against one range of its paged latent cache: each cache row is
//    loaded once and used by every head (MQA).
// Every kernel exists once per CpuIsa (kernels_<isa>.cpp, compiled with that
// ISA's flags only); kernel_table() picks one at run time.
//
// Layouts: "lanes" are query rows processed together, W per vector (16 on
// AVX-512, 8 on AVX2 and scalar); a group is W lanes. Scores are kept
// transposed (lane = query row), so the online softmax is elementwise across
// keys and never needs a horizontal reduction.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lattn/cpu.h"
#include "lattn/dtype.h"

namespace lattn::cpu {

// How scores and outputs are multiplied.
enum class MathPath : uint8_t {
  f32_fma,   // operands converted to f32, f32 FMA (every ISA; f16 and f32 data)
  bf16_dot,  // bf16 operands in pairs through vdpbf16ps, f32 accumulation (avx512bf16, bf16 data)
};

// Prefill: `rows` query rows of one (request, head) against that request's keys.
struct PrefillTileJob {
  MathPath path = MathPath::f32_fma;
  const void* q = nullptr;  // [rows][dqk] of q_dtype, row i at q + i * q_stride (elements)
  int64_t q_stride = 0;
  DType q_dtype = DType::f32;
  // The same queries already in the kernel's layout (pack_prefill_queries),
  // or null: the kernel packs them itself.
  const void* q_packed = nullptr;
  int rows = 0;  // 1..prefill_tile_rows
  int dqk = 0, dv = 0;
  // Keys [num_keys][dqk], key j at k + j * k_stride (elements):
  //   f32_fma: f32; bf16_dot: bf16.
  const void* k = nullptr;
  int64_t k_stride = 0;
  // Values:
  //   f32_fma:  f32 [num_keys][dv], key j at v + j * v_stride (elements);
  //   bf16_dot: key pairs [ceil(num_keys / 2)][dv] of uint32 (pack_value_pairs),
  //             pair p at v + p * v_stride (uint32 elements).
  const void* v = nullptr;
  int64_t v_stride = 0;
  int num_keys = 0;
  // causal: row i sees keys [0, first_row + i + 1) (first_row: this tile's
  // first row within the request, whose keys are its own tokens);
  // otherwise every key.
  bool causal = false;
  int first_row = 0;
  float scale = 0.f;    // softmax scale
  void* out = nullptr;  // [rows][dv] of out_dtype, row i at out + i * out_stride (elements)
  int64_t out_stride = 0;
  DType out_dtype = DType::f32;  // f32/f16/bf16, or fp8_e4m3: out = fp8(o / out_scale)
  float out_scale = 1.f;
  float* lse = nullptr;  // natural-log LSE of row i at lse[i * lse_stride]; may be null
  int64_t lse_stride = 0;
  void* scratch = nullptr;  // prefill_scratch_bytes(dqk, dv), 64-byte aligned, this thread's
};

// Decode: all s_q * num_heads query rows of one request against its cache
// keys [key_begin, key_end). Lane (j, h) = j * num_heads + h is query token j
// (position seq_len - s_q + j, sees keys [0, seq_len - s_q + j + 1)) of head h.
struct DecodeSplitJob {
  MathPath path = MathPath::f32_fma;
  const void* ql_nope = nullptr;  // [s_q][num_heads][L] of q_dtype, strides in elements
  int64_t ql_stride_t = 0, ql_stride_h = 0;
  const void* q_pe = nullptr;  // [s_q][num_heads][R] of q_dtype
  int64_t qpe_stride_t = 0, qpe_stride_h = 0;
  DType q_dtype = DType::f32;
  int s_q = 1, num_heads = 0, kv_lora_rank = 0, rope_dim = 0;
  const void* cache = nullptr;  // [num_blocks][block_size][L + R] of cache_dtype, contiguous rows
  DType cache_dtype = DType::bf16;
  int64_t block_stride = 0;  // elements between blocks
  int block_size = 0;
  float cache_scale = 1.f;               // fp8: value = stored * cache_scale; else 1
  const int32_t* block_table = nullptr;  // this request's row of the block table
  // decode_split_ds_mla only: key i is the fp8_ds_mla entry at cache +
  // entry_offsets[i] bytes (block_table, block_size and block_stride unused).
  const int64_t* entry_offsets = nullptr;
  int seq_len = 0;
  int key_begin = 0, key_end = 0;  // the split's keys
  float scale = 0.f;               // softmax scale
  // Partial result of the split: o [lanes][L] f32 (normalized by this split's
  // softmax sum) and lse [lanes] (natural log, -inf for a lane with no key).
  float* o = nullptr;
  float* lse = nullptr;
  void* scratch = nullptr;  // decode_scratch_bytes(lanes, L, R), 64-byte aligned
};

struct KernelTable {
  CpuIsa isa = CpuIsa::scalar;
  int lanes_per_group = 8;     // W
  int prefill_tile_rows = 16;  // query rows per PrefillTileJob
  MathPath (*prefill_path)(DType act_dtype) = nullptr;
  MathPath (*decode_path)(DType act_dtype, DType cache_dtype) = nullptr;
  size_t (*prefill_scratch_bytes)(int dqk, int dv) = nullptr;
  size_t (*decode_scratch_bytes)(int lanes, int kv_lora_rank, int rope_dim) = nullptr;
  void (*prefill_tile)(const PrefillTileJob& job) = nullptr;
  // The job's queries (q, q_stride, q_dtype, rows, dqk, path; scratch as
  // temporary) in the layout q_packed expects, prefill_query_bytes(dqk) at dst.
  size_t (*prefill_query_bytes)(int dqk) = nullptr;
  void (*pack_prefill_queries)(const PrefillTileJob& job, void* dst) = nullptr;
  void (*decode_split)(const DecodeSplitJob& job) = nullptr;
  // Decode straight from fp8_ds_mla entries (job.entry_offsets; bf16 queries,
  // bf16_dot path), or null where this ISA has no such kernel (the caller then
  // dequantizes rows first). Scratch: decode_ds_mla_scratch_bytes(lanes, L, R).
  size_t (*decode_ds_mla_scratch_bytes)(int lanes, int kv_lora_rank, int rope_dim) = nullptr;
  void (*decode_split_ds_mla)(const DecodeSplitJob& job) = nullptr;
  // dst[i] = f32(src[i]) for i < n (src of f32/f16/bf16/fp8_e4m3, unscaled).
  void (*to_f32)(const void* src, DType src_dtype, int64_t n, float* dst) = nullptr;
  // dst[i] = src[i] rounded to dst_dtype (f32/f16/bf16, round to nearest even) for i < n.
  void (*from_f32)(const float* src, int64_t n, DType dst_dtype, void* dst) = nullptr;
  // The split-KV combine of one output row: dst[d] = (sum_s weights[s] *
  // parts[s][d]) * scale rounded to dst_dtype for d < n, parts in the order given.
  void (*combine_row)(const float* const* parts, const float* weights, int num_parts, int64_t n, float scale,
                      DType dst_dtype, void* dst) = nullptr;
  // Value pairs for bf16_dot: dst[d] = even[d] | odd[d] << 16 for d < n
  // (bf16 bit patterns; odd == nullptr means a zero row).
  void (*pack_value_pairs)(const uint16_t* even, const uint16_t* odd, int64_t n, uint32_t* dst) = nullptr;
};

// The kernels of `isa` (which this CPU must be able to run).
const KernelTable& kernel_table(CpuIsa isa);

// One table per ISA, defined in kernels_<isa>.cpp.
const KernelTable& kernels_scalar();
const KernelTable& kernels_avx2();
const KernelTable& kernels_avx512();       // f32 FMA only
const KernelTable& kernels_avx512_bf16();  // adds the bf16_dot path

}  // namespace lattn::cpu
