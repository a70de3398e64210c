// src/core/metadata/batch_validation.h — pass 1 of a metadata build
// (internal): validates a batch description and computes every size the
// fill pass needs, before anything is allocated. Every refusal names the
// request and its values (docs/metadata.md); nothing is built on error.
#pragma once

#include <cstdint>

#include "core/metadata/batch_inputs.h"
#include "core/metadata/context_chunk_plan.h"
#include "core/metadata/graph_buffers.h"
#include "lattn/metadata.h"

namespace lattn::detail {

// Everything the fill pass needs, computed before any allocation.
struct BatchPlan {
  int num_reqs = 0;     // real requests
  int num_rows = 0;     // requests incl. CUDA-graph padding
  int num_decodes = 0;  // real decodes
  int num_prefills = 0;
  int64_t num_tokens = 0;         // real tokens
  int64_t num_decode_tokens = 0;  // real decode tokens
  int64_t num_slots = 0;          // slot_mapping length (>= num_tokens)
  int64_t num_slots_to_copy = 0;  // given slots copied (the rest is computed or PAD)
  int64_t block_table_width = 0;
  int max_query_len = 0;
  int max_decode_query_len = 1;
  int max_prefill_seq_len = 0;
  int max_decode_seq_len = 0;
  detail::ContextChunkSizing chunks;
};

// `graph` may be nullptr (no CUDA-graph configuration).
BatchPlan plan_batch(const MetadataBuilderConfig& cfg, const GraphBuffers* graph, const SpecBatch& batch,
                     const BuildOptions& options);
BatchPlan plan_batch(const MetadataBuilderConfig& cfg, const GraphBuffers* graph, const CommonBatch& batch,
                     const BuildOptions& options);

}  // namespace lattn::detail
