// src/cuda/smxx/decode_params.h — what the decode kernels read: one params
// struct for the attention kernels and one for the split-KV plan. Raw
// pointers and strides in ELEMENTS; every pointer's shape is stated.
//
// Rows: the decode kernels pack (query token j, head h) of one request into
// row j * num_heads + h of the tensor-core M dimension (FlashMLA's "heads x
// query tokens"), so all query tokens and heads of a request share each KV
// tile they read.
#pragma once

#include <cstdint>

namespace lattn::cuda {

// The split-KV plan, in a caller-owned pointer-stable workspace (written by
// decode_plan_kernel, read by the attention and combine kernels).
//
// Work model (FlashMLA's scheduler): request r costs tiles_r + overhead
// "tile units" (tiles_r = ceil(seq_len_r / tile_keys); overhead models the Q
// load and epilogue), 0 when it has no keys. cost_prefix is the exclusive
// prefix sum of the costs; part p of num_parts processes the cost positions
// [p * W, (p + 1) * W) with W = ceil(total / num_parts): every part gets the
// same amount of work whatever the lengths are. A request whose tiles fall in
// several parts is split; each of its parts writes a partial result (O/l and
// LSE) and decode_combine merges them. Unsplit requests are written directly.
struct DecodePlan {
  int32_t* header = nullptr;          // [2]: W (cost per part), total cost
  int32_t* cost_prefix = nullptr;     // [batch + 1]
  int32_t* num_splits = nullptr;      // [batch]: parts that attend to the request (0 = no keys)
  int32_t* split_offset = nullptr;    // [batch + 1]: first partial slot of each split request
  int32_t* part_first_req = nullptr;  // [num_parts]: first request a part may touch
  float* partial_o = nullptr;         // [slot_capacity, rows_capacity, L] f32, normalized (O / l)
  float* partial_lse = nullptr;       // [slot_capacity, rows_capacity] f32 (natural log)
  float* fold_o = nullptr;            // fold_splits: [num_parts, rows_capacity, L] f32, each part's fold scratch
  int num_parts = 0;
  int slot_capacity = 0;  // 2 * num_parts suffices (decode_scheduler.cu); folding plans may need more
  int rows_capacity = 0;  // m_tiles * block_m >= num_heads * max query tokens
  int tile_keys = 64;     // keys per tile of the attention kernel
  int overhead_tiles = 4;
  // Batch-invariant plan (docs/mla.md, "Batch invariance"): every request is
  // cut into splits whose size depends on its own length only
  // (batch_invariant_split.h); the cost unit is one split instead of one tile
  // (cost = the request's number of splits, W = ceil(splits / parts),
  // overhead_tiles = 0): part p covers splits [p W, (p + 1) W) of the batch,
  // which the piece walk maps to their tiles.
  bool batch_invariant = false;
  // Batch-invariant plans: the split rule (batch_invariant_split.h), fixed by
  // the kernel's tiles; and whether the kernel folds the splits of one piece
  // itself (decode_fold.cuh: hopper's wgmma kernel; the sm80 kernel's 16-row tiles, opt-in). With folding,
  // a part may take several consecutive splits (W > 1, one wave of parts for
  // any batch): a request whose splits all lie in one part is folded and
  // written there (num_splits 1); a request met by several parts gets one
  // slot per split (num_splits = its split count), the part holding its
  // first split writes the fold of its splits into the slot of the last one
  // (LSE -inf in the slots before it), the other parts write each split, and
  // the combine folds the slots in order: the same bits as one CTA folding
  // every split. Without folding every part is one split (W = 1).
  int split_rule = 2;
  bool fold_splits = false;
};

struct DecodeParams {
  const void* q_nope = nullptr;  // [T, H, L] activation dtype (ql_nope = q_nope . W_UK_T)
  int64_t q_nope_stride_t = 0, q_nope_stride_h = 0;
  const void* q_pe = nullptr;  // [T, H, R]
  int64_t q_pe_stride_t = 0, q_pe_stride_h = 0;
  const void* cache = nullptr;  // [num_blocks, block_size, L + R], f16/bf16/fp8_e4m3
  int64_t cache_block_stride = 0;
  int block_size = 0;
  const int32_t* seq_lens = nullptr;         // [batch] keys per request (context + new)
  const int32_t* query_start_loc = nullptr;  // [batch + 1] token offsets, [0] == 0
  const int32_t* block_table = nullptr;      // [batch, max_blocks]
  int64_t block_table_stride = 0;
  // Bounds of the device-resident block table, checked by the kernels
  // (cuda/common/index_check.h); 0 = not checked.
  int64_t num_blocks = 0;                // ids must be in [0, num_blocks)
  int64_t table_width = 0;               // max_blocks
  uint32_t* index_violations = nullptr;  // this device's violation words (may be nullptr)
  void* out = nullptr;                   // [T, H, L] activation dtype
  int64_t out_stride_t = 0, out_stride_h = 0;
  float* lse = nullptr;  // [H, T] f32 natural log; may be nullptr
  int64_t lse_stride_h = 0, lse_stride_t = 0;
  int batch = 0, num_heads = 0, L = 0, R = 0;
  float scale_log2 = 0.f;  // softmax scale * log2(e) * (fp8: cache scale)
  float out_scale = 1.f;   // fp8: cache scale (V = stored * scale), else 1
  bool q_vec = false;      // Q rows can be read with 16-byte copies
  // Runtime dtypes, for the generic kernel (the fast kernel has them as types).
  uint8_t q_dtype = 0, cache_dtype = 0, out_dtype = 0;
  DecodePlan plan;
};

}  // namespace lattn::cuda
