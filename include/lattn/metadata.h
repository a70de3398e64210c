// lattn/metadata.h — the per-step "plan": attention metadata for a mixed
// batch of decodes and prefills, and the context-chunk plan.
//
// Row order everywhere is vLLM v1's: DECODES FIRST, THEN PREFILLS. Request
// rows [0, num_decodes) are decodes (query_len <= reorder_batch_threshold),
// rows [num_decodes, num_reqs) prefills; token rows [0, num_decode_tokens)
// belong to decodes, [num_decode_tokens, num_actual_tokens) to prefills.
//
// Index arrays are Tensor views into storage owned by the metadata object:
//   X_cpu  — host copy (always present)
//   X      — the copy on the metadata's device (== X_cpu when device is cpu),
//            filled by MlaMetadata::to_device (plan time, not run time).
// Copies of an MlaMetadata share storage, so views stay valid.
//
// Terms (seed 002): context_len = tokens already computed and cached
// (num_computed_tokens), query_len = new tokens this step,
// seq_len = context_len + query_len.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lattn/device.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn {

// Slot id of a padded token: cache writers skip it.
inline constexpr int64_t PAD_SLOT_ID = -1;

// Context-chunk plan of the prefill rows (seed 002, MLACommonMetadataBuilder.build).
// Chunk i gathers, for prefill p, context tokens
// [starts[i][p], starts[i][p] + (cu_seq_lens[i][p+1] - cu_seq_lens[i][p])) into
// workspace rows [cu_seq_lens[i][p], cu_seq_lens[i][p+1]).
struct ContextChunkPlan {
  int num_chunks = 0;                   // 0 when no prefill has context
  int64_t max_context_chunk = 0;        // tokens per prefill per chunk (page aligned)
  Tensor starts_cpu, starts;            // [num_chunks, num_prefills] int32
  Tensor cu_seq_lens_cpu, cu_seq_lens;  // [num_chunks, num_prefills + 1] int32
  std::vector<int32_t> max_seq_lens;    // [num_chunks] longest per-request chunk
  std::vector<int32_t> seq_tot;         // [num_chunks] tokens gathered (<= workspace)
};

// Decode view: request rows [0, num_decodes), rebased to start at 0.
struct DecodeMetadata {
  int num_decodes = 0;
  int num_decode_tokens = 0;
  int max_decode_query_len = 1;        // s_q (> 1 for speculative / MTP decodes)
  int max_decode_seq_len = 0;
  int block_size = 0;
  Tensor query_start_loc_cpu, query_start_loc;  // [num_decodes + 1] int32, [0] == 0
  Tensor seq_lens_cpu, seq_lens;                // [num_decodes] int32 (context + new)
  Tensor block_table_cpu, block_table;          // [num_decodes, max_blocks] int32
};

// Prefill view: request rows [num_decodes, num_reqs), rebased to start at 0.
struct PrefillMetadata {
  int num_prefills = 0;
  int num_prefill_tokens = 0;
  int max_query_len = 0;               // longest prefill query
  int max_prefill_seq_len = 0;
  int block_size = 0;
  Tensor query_start_loc_cpu, query_start_loc;  // [num_prefills + 1] int32, [0] == 0
  Tensor seq_lens_cpu, seq_lens;                // [num_prefills] int32
  Tensor context_lens_cpu, context_lens;        // [num_prefills] int32
  Tensor block_table_cpu, block_table;          // [num_prefills, max_blocks] int32
  ContextChunkPlan chunks;
  bool has_context() const { return chunks.num_chunks > 0; }
};

namespace detail {
struct MetadataStorage;  // owns the arrays behind every Tensor view
}

// Attention metadata of one step (seed 002's MLACommonMetadata, v1 order).
struct MlaMetadata {
  int num_reqs = 0;
  int num_actual_tokens = 0;           // real tokens; slot_mapping may be longer (padding)
  int num_decodes = 0;
  int num_prefills = 0;
  int num_decode_tokens = 0;
  int num_prefill_tokens = 0;
  int max_query_len = 0;
  int block_size = 0;
  int64_t context_chunk_workspace_size = 0;  // rows of the gather workspace (0: no chunking)
  Device device = Device::cpu();

  Tensor query_start_loc_cpu, query_start_loc;  // [num_reqs + 1] int32
  Tensor seq_lens_cpu, seq_lens;                // [num_reqs] int32
  Tensor context_lens_cpu, context_lens;        // [num_reqs] int32 (num_computed_tokens)
  Tensor block_table_cpu, block_table;          // [num_reqs, max_blocks] int32
  Tensor slot_mapping_cpu, slot_mapping;        // [>= num_actual_tokens] int64, PAD_SLOT_ID past the end

  std::optional<DecodeMetadata> decode;        // absent when num_decodes == 0
  std::optional<PrefillMetadata> prefill;      // absent when num_prefills == 0

  // The seeds' properties: nullptr when that part is empty.
  const DecodeMetadata* decode_metadata() const { return decode ? &*decode : nullptr; }
  const PrefillMetadata* prefill_metadata() const { return prefill ? &*prefill : nullptr; }

  // Copies every index array to `device` (asynchronously on `stream` for CUDA)
  // and points the device views at the copies. Idempotent for the same device.
  void to_device(Device device, Stream stream = nullptr);

  std::shared_ptr<detail::MetadataStorage> storage;
};

}  // namespace lattn
