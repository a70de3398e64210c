// src/core/metadata/context_chunk_plan.h — the seed's context-chunk planning
// (MLACommonMetadataBuilder.build, docs/metadata.md), split into sizing
// (scalars, before anything is allocated) and filling (internal).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lattn::detail {

struct ContextChunkSizing {
  int num_chunks = 0;             // 0: no planning (no prefill has context, or chunking disabled)
  int64_t max_context_chunk = 0;  // tokens per prefill per chunk, a multiple of page_size
  int num_prefills_with_context = 0;
  // Batch-invariant plans only (plan_batch_invariant_chunks): the piece of
  // each prefill in each chunk, [num_chunks][num_prefills] (start, length);
  // empty: the seed's plan (chunk i = [i, i+1) * max_context_chunk for all).
  std::vector<int32_t> piece_start, piece_len;
};

// Scalars of the plan. Throws AssertionError "max_context_chunk > 0 ..." when
// the workspace cannot give each prefill with context one page.
//   max_context_len_all      longest context of the whole batch (decodes included: seed)
//   max_prefill_context_len  longest context among the prefills
ContextChunkSizing size_context_chunks(bool planning_enabled, int num_prefills, int num_prefills_with_context,
                                       int64_t max_context_len_all, int64_t max_prefill_context_len,
                                       int64_t workspace_size, int page_size);

// The batch-invariant plan (docs/mla.md, "Batch invariance"): each prefill's
// context is cut at multiples of `chunk_len` tokens (a multiple of the page
// size, <= workspace_size), whatever the other prefills are; chunks are
// then filled greedily, each taking the next piece of every prefill in
// order while the workspace has room, so a prefill's pieces stay in
// position order. chunk_len must be > 0.
//   prefill_context_lens [num_prefills]
ContextChunkSizing plan_batch_invariant_chunks(std::span<const int64_t> prefill_context_lens, int64_t workspace_size,
                                               int64_t chunk_len);

// The chunk length of batch-invariant plans: `configured` when > 0 (rounded
// down to the page size), else an eighth of the workspace, rounded down to
// the page size; at least one page, at most the workspace. Throws
// AssertionError when the workspace cannot hold one page.
int64_t batch_invariant_chunk_len(int64_t configured, int64_t workspace_size, int page_size);

// Fills the plan for the prefills' context lengths.
//   prefill_context_lens [num_prefills]
//   starts               [num_chunks, num_prefills]      (written)
//   cu_seq_lens          [num_chunks, num_prefills + 1]  (written)
//   max_seq_lens, seq_tot [num_chunks]                   (written)
// Throws AssertionError if a chunk would exceed the workspace (cannot happen
// for a sizing from size_context_chunks; kept as the seed's assertion).
void fill_context_chunks(const ContextChunkSizing& sizing, std::span<const int32_t> prefill_context_lens,
                         int64_t workspace_size, int32_t* starts, int32_t* cu_seq_lens, int32_t* max_seq_lens,
                         int32_t* seq_tot);

}  // namespace lattn::detail
