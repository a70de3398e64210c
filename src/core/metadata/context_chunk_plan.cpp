// Context-chunk planning (see core/metadata/context_chunk_plan.h). The workspace is
// shared equally among the prefills that have context and rounded down to the
// page size, because gather_cache cannot start a chunk inside a page (seed 002).
#include "core/metadata/context_chunk_plan.h"

#include <algorithm>
#include <string>

#include "lattn/errors.h"

namespace lattn::detail {

ContextChunkSizing size_context_chunks(bool planning_enabled, int num_prefills, int num_prefills_with_context,
                                       int64_t max_context_len_all, int64_t max_prefill_context_len,
                                       int64_t workspace_size, int page_size) {
  ContextChunkSizing s;
  if (!planning_enabled || num_prefills == 0 || max_prefill_context_len <= 0) return s;
  s.num_prefills_with_context = num_prefills_with_context;
  const int64_t equal_share = workspace_size / num_prefills_with_context;
  s.max_context_chunk = equal_share / page_size * page_size;  // round_down(x, page_size)
  if (s.max_context_chunk <= 0) {
    throw AssertionError("max_context_chunk > 0 (context_chunk_workspace_size " + std::to_string(workspace_size) +
                         " shared by " + std::to_string(num_prefills_with_context) + " prefills with context gives " +
                         std::to_string(equal_share) + " tokens each, which rounds down to 0 at page_size " +
                         std::to_string(page_size) + "; the workspace needs at least " +
                         std::to_string(int64_t(num_prefills_with_context) * page_size) + " rows)");
  }
  // cdiv over the longest context of the whole batch, decodes included, as
  // the seed does: trailing chunks may be empty for every prefill.
  // cdiv without the overflow of (x + chunk - 1) for a chunk near 2^63 (found by fuzzing).
  const int64_t num_chunks = max_context_len_all <= 0 ? 0 : (max_context_len_all - 1) / s.max_context_chunk + 1;
  // The plan holds ~2 ints per (chunk, prefill): a context of billions of
  // tokens cut into tiny chunks would ask for gigabytes (found by fuzzing).
  constexpr int64_t kMaxChunks = int64_t(1) << 20, kMaxPlanEntries = int64_t(1) << 22;
  if (num_chunks > kMaxChunks || num_chunks * (int64_t(num_prefills) + 1) > kMaxPlanEntries) {
    throw ValueError("context chunk plan: the longest context (" + std::to_string(max_context_len_all) +
                     " tokens) in chunks of " + std::to_string(s.max_context_chunk) + " tokens for " +
                     std::to_string(num_prefills) + " prefills needs " + std::to_string(num_chunks) +
                     " chunks, more than a plan holds (" + std::to_string(kMaxChunks) + " chunks, " +
                     std::to_string(kMaxPlanEntries) +
                     " chunk x prefill entries); raise "
                     "context_chunk_workspace_size");
  }
  s.num_chunks = int(num_chunks);
  return s;
}

int64_t batch_invariant_chunk_len(int64_t configured, int64_t workspace_size, int page_size) {
  if (workspace_size < page_size) {
    throw AssertionError(
        "batch-invariant context chunks need a workspace of at least one page (context_chunk_"
        "workspace_size " +
        std::to_string(workspace_size) + ", page_size " + std::to_string(page_size) + ")");
  }
  int64_t len = configured > 0 ? configured : workspace_size / 8;
  len = std::min(len, workspace_size) / page_size * page_size;
  return std::max<int64_t>(len, page_size);
}

ContextChunkSizing plan_batch_invariant_chunks(std::span<const int64_t> prefill_context_lens, int64_t workspace_size,
                                               int64_t chunk_len) {
  ContextChunkSizing s;
  const size_t np = prefill_context_lens.size();
  s.max_context_chunk = chunk_len;
  std::vector<int64_t> next(np, 0);  // each prefill's next piece start
  for (int64_t len : prefill_context_lens) s.num_prefills_with_context += len > 0;
  size_t remaining = size_t(s.num_prefills_with_context);
  while (remaining > 0) {
    int64_t room = workspace_size;
    for (size_t p = 0; p < np; ++p) {
      const int64_t start = next[p], len = std::min(chunk_len, prefill_context_lens[p] - start);
      // Pieces are never split: a prefill whose piece does not fit waits for the next chunk.
      if (len <= 0 || len > room) {
        s.piece_start.push_back(0);  // empty piece (gather_cache wants page-aligned starts even then)
        s.piece_len.push_back(0);
        continue;
      }
      s.piece_start.push_back(int32_t(start));
      s.piece_len.push_back(int32_t(len));
      room -= len;
      next[p] = start + len;
      if (next[p] == prefill_context_lens[p]) --remaining;
    }
    ++s.num_chunks;
  }
  return s;
}

void fill_context_chunks(const ContextChunkSizing& sizing, std::span<const int32_t> prefill_context_lens,
                         int64_t workspace_size, int32_t* starts, int32_t* cu_seq_lens, int32_t* max_seq_lens,
                         int32_t* seq_tot) {
  const int num_prefills = int(prefill_context_lens.size());
  const int64_t chunk = sizing.max_context_chunk;
  if (!sizing.piece_len.empty()) {  // batch-invariant: the pieces planned by plan_batch_invariant_chunks
    for (int i = 0; i < sizing.num_chunks; ++i) {
      int32_t* row_cu = cu_seq_lens + int64_t(i) * (num_prefills + 1);
      int32_t total = 0, longest = 0;
      row_cu[0] = 0;
      for (int p = 0; p < num_prefills; ++p) {
        const size_t k = size_t(i) * size_t(num_prefills) + size_t(p);
        starts[int64_t(i) * num_prefills + p] = sizing.piece_start[k];
        total += sizing.piece_len[k];
        longest = std::max(longest, sizing.piece_len[k]);
        row_cu[p + 1] = total;
      }
      max_seq_lens[i] = longest;
      seq_tot[i] = total;
    }
    return;
  }
  for (int i = 0; i < sizing.num_chunks; ++i) {
    const int64_t start = int64_t(i) * chunk;
    int32_t* row_starts = starts + int64_t(i) * num_prefills;
    int32_t* row_cu = cu_seq_lens + int64_t(i) * (num_prefills + 1);
    int64_t total = 0;
    int64_t longest = 0;
    row_cu[0] = 0;
    for (int p = 0; p < num_prefills; ++p) {
      // chunk_seq_lens = clamp(min(context_len, start + chunk) - start, min=0)
      const int64_t len = std::max<int64_t>(0, std::min<int64_t>(prefill_context_lens[p], start + chunk) - start);
      row_starts[p] = int32_t(start);
      total += len;
      longest = std::max(longest, len);
      row_cu[p + 1] = int32_t(total);
    }
    max_seq_lens[i] = int32_t(longest);
    seq_tot[i] = int32_t(total);
    if (total > workspace_size) {
      throw AssertionError("max(context_chunk_seq_tot) <= context_chunk_workspace_size (chunk " + std::to_string(i) +
                           " gathers " + std::to_string(total) + " tokens, workspace holds " +
                           std::to_string(workspace_size) + ")");
    }
  }
}

}  // namespace lattn::detail
