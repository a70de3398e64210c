// Pass 1 of a metadata build: validation and sizes (see batch_validation.h).
//
// The build runs every step, so this pass touches each input once and
// allocates nothing per request.
#include "core/metadata/batch_validation.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/types/batch_invariant.h"
#include "lattn/errors.h"

namespace lattn::detail {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string python_list(const auto& batch) {
  std::string s = "[";
  for (int r = 0; r < batch.size(); ++r) {
    if (r) s += ", ";
    s += std::to_string(batch.query_len(r));
  }
  return s + "]";
}

template <class Batch>
BatchPlan plan_batch_impl(const MetadataBuilderConfig& cfg, const GraphBuffers* graph, const Batch& batch,
                          const BuildOptions& options) {
  const std::string op = "MlaMetadataBuilder.build: ";
  BatchPlan plan;
  plan.num_reqs = batch.size();
  if (plan.num_reqs == 0) throw ValueError(op + "the batch is empty (num_reqs == 0)");

  int64_t max_query_len = std::numeric_limits<int64_t>::min();
  for (int r = 0; r < plan.num_reqs; ++r) max_query_len = std::max(max_query_len, batch.query_len(r));
  // The seed's assertion, with its text (docs/vllm.md).
  if (max_query_len <= 0) throw AssertionError("query_lens: " + python_list(batch));

  const bool graph_build = options.cudagraph_batch_size.has_value();
  if (graph_build) {
    if (!graph) {
      throw ValueError(op + "a CUDA-graph build (cudagraph_batch_size " +
                       std::to_string(*options.cudagraph_batch_size) + ") needs MetadataBuilderConfig::cudagraph");
    }
    const int batch_size = *options.cudagraph_batch_size;
    if (batch_size < plan.num_reqs || batch_size > graph->max_batch_size) {
      throw ValueError(op + "cudagraph_batch_size must be in [num_reqs, max_batch_size] = [" +
                       std::to_string(plan.num_reqs) + ", " + std::to_string(graph->max_batch_size) + "], got " +
                       std::to_string(batch_size));
    }
  }

  const int block_size = cfg.block_size;
  const int threshold = cfg.reorder_batch_threshold;
  // Valid block ids are [0, max_block_id]: below num_cache_blocks, or any
  // non-negative int32 when the cache size is unknown.
  const uint32_t max_block_id = cfg.num_cache_blocks > 0
                                    ? uint32_t(std::min<int64_t>(cfg.num_cache_blocks, kInt32Max + 1) - 1)
                                    : uint32_t(kInt32Max);
  const bool chunking = cfg.chunked_prefill_enabled || cfg.enable_prefix_caching;
  int first_prefill = -1;
  int64_t max_context_all = 0, max_context_prefill = 0;
  int prefills_with_context = 0;
  int64_t max_decode_query = 0, max_prefill_seq = 0, max_decode_seq = 0;

  for (int r = 0; r < plan.num_reqs; ++r) {
    const int64_t query_len = batch.query_len(r);
    const int64_t context_len = batch.context_len(r);
    // Built only on error: the loop runs for every request of every step.
    auto req = [r] { return "request " + std::to_string(r); };
    if (query_len <= 0) {
      throw ValueError(op + req() + " has query_len " + std::to_string(query_len) +
                       "; every request needs query_len > 0");
    }
    if (context_len < 0) {
      throw ValueError(op + req() + " has num_computed_tokens " + std::to_string(context_len) + "; it must be >= 0");
    }
    const int64_t seq_len = context_len + query_len;
    if (seq_len > kInt32Max) {
      throw ValueError(op + req() + " has seq_len " + std::to_string(seq_len) + " (num_computed_tokens " +
                       std::to_string(context_len) + " + query_len " + std::to_string(query_len) +
                       "), beyond the int32 index range");
    }
    plan.num_tokens += query_len;
    if (plan.num_tokens > kInt32Max) {
      throw ValueError(op + "the batch has more than 2^31-1 tokens (at request " + std::to_string(r) + ")");
    }

    const bool is_decode = query_len <= threshold;
    if (!is_decode) {
      if (first_prefill < 0) first_prefill = r;
    } else if (first_prefill >= 0) {
      throw AssertionError(op + "the batch is not reordered (decodes first): request " + std::to_string(first_prefill) +
                           " is a prefill (query_len " + std::to_string(batch.query_len(first_prefill)) +
                           " > reorder_batch_threshold " + std::to_string(threshold) + ") but " + req() +
                           " after it is a decode (query_len " + std::to_string(query_len) +
                           "); call reorder_batch_to_split_decodes_and_prefills first");
    }
    if (graph_build && query_len != 1) {
      throw ValueError(op + "a CUDA-graph build needs a decode-only batch with one query token per request; " + req() +
                       " has query_len " + std::to_string(query_len));
    }

    if (!options.is_profile_run) {
      const std::span<const int32_t> row = batch.block_row(r);
      const int64_t needed = cdiv(seq_len, block_size);
      if (int64_t(row.size()) < needed) {
        throw ValueError(op + req() + " has a block table of " + std::to_string(row.size()) + " blocks, but seq_len " +
                         std::to_string(seq_len) + " (num_computed_tokens " + std::to_string(context_len) +
                         " + query_len " + std::to_string(query_len) + ") at block_size " + std::to_string(block_size) +
                         " needs " + std::to_string(needed));
      }
      // Range check without a branch per entry: id is valid iff both id and
      // (limit - 1 - id) have a clear top bit (unsigned wrap-around), so an
      // OR over the row vectorizes; the offending entry is searched for only
      // when some entry is bad.
      uint32_t top_bits = 0;
      const int32_t* ids = row.data();
      for (int64_t j = 0; j < needed; ++j) top_bits |= uint32_t(ids[j]) | (max_block_id - uint32_t(ids[j]));
      const bool any_bad = (top_bits & 0x80000000u) != 0;
      if (any_bad) {
        for (int64_t j = 0; j < needed; ++j) {
          const int32_t block = row[j];
          if (block < 0 || (cfg.num_cache_blocks > 0 && block >= cfg.num_cache_blocks)) {
            throw ValueError(op + req() + " has block_table[" + std::to_string(j) + "] = " + std::to_string(block) +
                             ", outside the cache's blocks [0, " +
                             (cfg.num_cache_blocks > 0 ? std::to_string(cfg.num_cache_blocks) : std::string("inf")) +
                             ")");
          }
        }
      }
      if (graph_build && needed > graph->max_blocks_per_seq) {
        throw ValueError(op + req() + " needs " + std::to_string(needed) + " blocks (seq_len " +
                         std::to_string(seq_len) +
                         "), more than the CUDA-graph block tables hold (max_blocks_per_seq " +
                         std::to_string(graph->max_blocks_per_seq) + ")");
      }
    }

    max_context_all = std::max(max_context_all, context_len);
    if (is_decode) {
      max_decode_query = std::max(max_decode_query, query_len);
      max_decode_seq = std::max(max_decode_seq, seq_len);
      plan.num_decode_tokens += query_len;
    } else {
      max_prefill_seq = std::max(max_prefill_seq, seq_len);
      max_context_prefill = std::max(max_context_prefill, context_len);
      if (context_len > 0) {
        ++prefills_with_context;
        if (!chunking) {
          throw ValueError(op + req() + " is a prefill with num_computed_tokens " + std::to_string(context_len) +
                           " > 0, but neither chunked_prefill_enabled nor enable_prefix_caching is set, so no "
                           "context can be planned");
        }
      }
    }
  }

  plan.num_decodes = first_prefill < 0 ? plan.num_reqs : first_prefill;
  plan.num_prefills = plan.num_reqs - plan.num_decodes;
  plan.max_query_len = int(max_query_len);
  plan.max_decode_query_len = plan.num_decodes > 0 ? int(max_decode_query) : 1;
  plan.max_prefill_seq_len = int(max_prefill_seq);
  plan.max_decode_seq_len = int(max_decode_seq);
  plan.num_rows = graph_build ? *options.cudagraph_batch_size : plan.num_reqs;

  // Slots: computed (one per token), given (the common metadata's, PAD tail
  // included), or padded up to the CUDA-graph batch.
  if (batch.given_slots()) {
    plan.num_slots = batch.num_given_slots();
    plan.num_slots_to_copy = plan.num_slots;
    const int64_t limit = cfg.num_cache_blocks > 0 ? cfg.num_cache_blocks * block_size : -1;
    const int64_t* slots = batch.given_slots();
    for (int64_t t = 0; t < plan.num_slots; ++t) {
      if (slots[t] < PAD_SLOT_ID || (limit >= 0 && slots[t] >= limit)) {
        throw ValueError(op + "slot_mapping[" + std::to_string(t) + "] = " + std::to_string(slots[t]) +
                         " is outside the cache's slots [0, " + (limit >= 0 ? std::to_string(limit) : "inf") +
                         ") and is not PAD_SLOT_ID (-1)");
      }
    }
  } else {
    plan.num_slots = plan.num_tokens;
  }
  if (graph_build) {
    // The graph's slot_mapping has one entry per (padded) request; the given
    // slots past the real tokens are PAD anyway.
    plan.num_slots = plan.num_rows;
    plan.num_slots_to_copy = std::min(plan.num_slots_to_copy, plan.num_tokens);
    plan.block_table_width = graph->max_blocks_per_seq;
  } else {
    plan.block_table_width = batch.block_table_width();
  }

  if (cfg.batch_invariant && chunking && plan.num_prefills > 0 && max_context_prefill > 0) {
    // Per-request chunk boundaries (docs/mla.md, "Batch invariance").
    std::vector<int64_t> lens;
    for (int r = plan.num_reqs - plan.num_prefills; r < plan.num_reqs; ++r) lens.push_back(batch.context_len(r));
    const int64_t len =
        batch_invariant_chunk_len(cfg.batch_invariant_context_chunk, cfg.context_chunk_workspace_size, block_size);
    plan.chunks = plan_batch_invariant_chunks(lens, cfg.context_chunk_workspace_size, len);
  } else {
    plan.chunks = size_context_chunks(chunking, plan.num_prefills, prefills_with_context, max_context_all,
                                      max_context_prefill, cfg.context_chunk_workspace_size, block_size);
  }
  return plan;
}

}  // namespace

BatchPlan plan_batch(const MetadataBuilderConfig& cfg, const GraphBuffers* graph, const SpecBatch& batch,
                     const BuildOptions& options) {
  return plan_batch_impl(cfg, graph, batch, options);
}

BatchPlan plan_batch(const MetadataBuilderConfig& cfg, const GraphBuffers* graph, const CommonBatch& batch,
                     const BuildOptions& options) {
  return plan_batch_impl(cfg, graph, batch, options);
}

}  // namespace lattn::detail
