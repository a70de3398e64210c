// The MLA metadata builder (see lattn/metadata.h): validates a batch, then
// lays every index array out in one arena and fills it in a single pass per
// array (seed 002's MLACommonMetadataBuilder.build, in v1 decodes-first order).
//
// The build runs every step, so it makes one allocation (the arena), no
// per-request allocation, and touches each input once to validate and once
// to copy.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/metadata/context_chunk_plan.h"
#include "core/metadata/graph_buffers.h"
#include "core/metadata/metadata_storage.h"
#include "core/metadata/slot_mapping.h"
#include "core/types/batch_invariant.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "lattn/overflow.h"

namespace lattn {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- the two batch descriptions, behind one accessor shape -----------------

// A list of RequestSpec.
class SpecBatch {
 public:
  explicit SpecBatch(std::span<const RequestSpec> requests) : requests_(requests) {}
  int size() const { return int(requests_.size()); }
  int64_t query_len(int r) const { return requests_[r].query_len; }
  int64_t context_len(int r) const { return requests_[r].num_computed_tokens; }
  std::span<const int32_t> block_row(int r) const { return requests_[r].block_table; }
  int64_t block_table_width() const {
    size_t width = 0;
    for (const RequestSpec& r : requests_) width = std::max(width, r.block_table.size());
    return int64_t(width);
  }
  // Slots are computed from the block tables.
  const int64_t* given_slots() const { return nullptr; }
  int64_t num_given_slots() const { return 0; }

 private:
  std::span<const RequestSpec> requests_;
};

// A CommonAttentionMetadata whose host arrays have been checked for dtype
// and shape (see check_common).
class CommonBatch {
 public:
  CommonBatch(const CommonAttentionMetadata& c, const Tensor& block_table, const Tensor& slot_mapping)
      : qsl_(c.query_start_loc_cpu.data_as<const int32_t>()),
        computed_(c.num_computed_tokens_cpu.data_as<const int32_t>()),
        num_reqs_(c.num_reqs),
        block_table_(block_table.data_as<const int32_t>()),
        block_row_stride_(block_table.dim() == 2 ? block_table.stride(0) : 0),
        width_(block_table.dim() == 2 ? block_table.size(1) : 0),
        slots_(slot_mapping.data_as<const int64_t>()),
        num_slots_(slot_mapping.size(0)) {}
  int size() const { return num_reqs_; }
  int64_t query_len(int r) const { return int64_t(qsl_[r + 1]) - qsl_[r]; }
  int64_t context_len(int r) const { return computed_[r]; }
  std::span<const int32_t> block_row(int r) const {
    return {block_table_ + r * block_row_stride_, size_t(width_)};
  }
  int64_t block_table_width() const { return width_; }
  const int64_t* given_slots() const { return slots_; }
  int64_t num_given_slots() const { return num_slots_; }

 private:
  const int32_t* qsl_;
  const int32_t* computed_;
  int num_reqs_;
  const int32_t* block_table_;
  int64_t block_row_stride_;
  int64_t width_;
  const int64_t* slots_;
  int64_t num_slots_;
};

// ---- pass 1: validation and sizes -------------------------------------------

// Everything the fill pass needs, computed before any allocation.
struct BatchPlan {
  int num_reqs = 0;             // real requests
  int num_rows = 0;             // requests incl. CUDA-graph padding
  int num_decodes = 0;          // real decodes
  int num_prefills = 0;
  int64_t num_tokens = 0;       // real tokens
  int64_t num_decode_tokens = 0;   // real decode tokens
  int64_t num_slots = 0;           // slot_mapping length (>= num_tokens)
  int64_t num_slots_to_copy = 0;   // given slots copied (the rest is computed or PAD)
  int64_t block_table_width = 0;
  int max_query_len = 0;
  int max_decode_query_len = 1;
  int max_prefill_seq_len = 0;
  int max_decode_seq_len = 0;
  detail::ContextChunkSizing chunks;
};

std::string python_list(const auto& batch) {
  std::string s = "[";
  for (int r = 0; r < batch.size(); ++r) {
    if (r) s += ", ";
    s += std::to_string(batch.query_len(r));
  }
  return s + "]";
}

template <class Batch>
BatchPlan plan_batch(const MetadataBuilderConfig& cfg, const detail::GraphBuffers* graph, const Batch& batch,
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
      throw ValueError(op + "a CUDA-graph build (cudagraph_batch_size " + std::to_string(*options.cudagraph_batch_size) +
                       ") needs MetadataBuilderConfig::cudagraph");
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
  const uint32_t max_block_id =
      cfg.num_cache_blocks > 0 ? uint32_t(std::min<int64_t>(cfg.num_cache_blocks, kInt32Max + 1) - 1) : uint32_t(kInt32Max);
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
      throw ValueError(op + req() + " has query_len " + std::to_string(query_len) + "; every request needs query_len > 0");
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
                         " + query_len " + std::to_string(query_len) + ") at block_size " +
                         std::to_string(block_size) + " needs " + std::to_string(needed));
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
        throw ValueError(op + req() + " needs " + std::to_string(needed) + " blocks (seq_len " + std::to_string(seq_len) +
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
    const int64_t len = detail::batch_invariant_chunk_len(cfg.batch_invariant_context_chunk,
                                                          cfg.context_chunk_workspace_size, block_size);
    plan.chunks = detail::plan_batch_invariant_chunks(lens, cfg.context_chunk_workspace_size, len);
  } else {
    plan.chunks = detail::size_context_chunks(chunking, plan.num_prefills, prefills_with_context, max_context_all,
                                              max_context_prefill, cfg.context_chunk_workspace_size, block_size);
  }
  return plan;
}

// ---- pass 2: fill -------------------------------------------------------------

// Arena offsets of one build.
struct Sections {
  size_t query_start_loc, seq_start_loc, seq_lens, context_lens, block_table, slot_mapping;
  size_t prefill_query_start_loc, chunk_starts, chunk_cu_seq_lens;
};

Sections lay_out(detail::ArenaLayout& layout, const BatchPlan& plan) {
  const size_t rows = size_t(plan.num_rows), prefills = size_t(plan.num_prefills);
  const size_t chunks = size_t(plan.chunks.num_chunks);
  Sections s;
  s.slot_mapping = layout.add(size_t(plan.num_slots), 8);
  s.query_start_loc = layout.add(rows + 1, 4);
  s.seq_start_loc = layout.add(rows + 1, 4);
  s.seq_lens = layout.add(rows, 4);
  s.context_lens = layout.add(rows, 4);
  s.prefill_query_start_loc = layout.add(prefills + 1, 4);
  s.chunk_starts = layout.add(chunks * prefills, 4);
  s.chunk_cu_seq_lens = layout.add(chunks * (prefills + 1), 4);
  s.block_table = layout.add(rows * size_t(plan.block_table_width), 4);
  return s;
}

Sections graph_sections(const detail::GraphBuffers& g) {
  Sections s{};
  s.slot_mapping = g.slot_mapping;
  s.query_start_loc = g.query_start_loc;
  s.seq_start_loc = g.seq_start_loc;
  s.seq_lens = g.seq_lens;
  s.context_lens = g.context_lens;
  s.block_table = g.block_table;
  // Graph builds are decode-only: the prefill sections are empty.
  s.prefill_query_start_loc = s.chunk_starts = s.chunk_cu_seq_lens = g.empty;
  return s;
}

template <class Batch>
MlaMetadata fill_metadata(const MetadataBuilderConfig& cfg, const detail::GraphBuffers* graph, const Batch& batch,
                          const BuildOptions& options, const BatchPlan& plan) {
  const bool graph_build = options.cudagraph_batch_size.has_value();
  std::shared_ptr<detail::MetadataStorage> storage;
  Sections sec;
  if (graph_build) {
    storage = graph->storage;
    sec = graph_sections(*graph);
  } else {
    storage = std::make_shared<detail::MetadataStorage>();
    detail::ArenaLayout layout;
    sec = lay_out(layout, plan);
    storage->host = Buffer(layout.total(), Device::cpu());
    storage->upload_ranges = {{0, layout.total()}};
  }
  std::byte* base = storage->host_base();
  auto i32 = [&](size_t offset) { return reinterpret_cast<int32_t*>(base + offset); };
  int32_t* qsl = i32(sec.query_start_loc);
  int32_t* ssl = i32(sec.seq_start_loc);
  int32_t* seq_lens = i32(sec.seq_lens);
  int32_t* context_lens = i32(sec.context_lens);
  int32_t* block_table = i32(sec.block_table);
  int64_t* slots = reinterpret_cast<int64_t*>(base + sec.slot_mapping);
  const int rows = plan.num_rows;
  const int64_t width = plan.block_table_width;

  // Per-request arrays, block table and slots.
  qsl[0] = 0;
  ssl[0] = 0;
  const int64_t* given_slots = batch.given_slots();
  const std::optional<int> window = cfg.sliding_window;
  for (int r = 0; r < plan.num_reqs; ++r) {
    const int64_t query_len = batch.query_len(r);
    const int64_t context_len = batch.context_len(r);
    const int64_t seq_len = context_len + query_len;
    qsl[r + 1] = int32_t(qsl[r] + query_len);
    ssl[r + 1] = int32_t(ssl[r] + seq_len);
    seq_lens[r] = int32_t(seq_len);
    context_lens[r] = int32_t(context_len);

    const std::span<const int32_t> row = batch.block_row(r);
    const int64_t copied = std::min<int64_t>(int64_t(row.size()), width);
    int32_t* out_row = block_table + int64_t(r) * width;
    if (copied > 0) std::memcpy(out_row, row.data(), size_t(copied) * 4);
    // Right-pad with 0 (make_tensor_with_pad). CUDA-graph tables are the
    // seed's persistent graph_block_tables: entries past a row's length are
    // left as they were (never read: they lie past seq_len).
    if (!graph_build && copied < width) std::memset(out_row + copied, 0, size_t(width - copied) * 4);

    if (given_slots) continue;
    int64_t* out = slots + qsl[r];
    if (options.is_profile_run) {
      std::fill(out, out + query_len, PAD_SLOT_ID);
    } else {
      const bool is_prompt = query_len > cfg.reorder_batch_threshold;
      const int64_t start_idx = is_prompt && window ? std::max<int64_t>(0, query_len - *window) : 0;
      detail::write_slots(out, seq_len, context_len, start_idx, cfg.block_size, row.data());
    }
  }
  if (given_slots) std::memcpy(slots, given_slots, size_t(plan.num_slots_to_copy) * 8);
  // CUDA-graph padding: one-token decodes of seq_len 1 over block 0, PAD slots
  // (seed: runner pads seq_lens with 1 and slot_mapping with PAD_SLOT_ID).
  for (int r = plan.num_reqs; r < rows; ++r) {
    qsl[r + 1] = qsl[r] + 1;
    ssl[r + 1] = ssl[r] + 1;
    seq_lens[r] = 1;
    context_lens[r] = 0;
    block_table[int64_t(r) * width] = 0;
  }
  const int64_t first_pad_slot = given_slots ? plan.num_slots_to_copy : plan.num_tokens;
  std::fill(slots + first_pad_slot, slots + plan.num_slots, PAD_SLOT_ID);

  // Prefill query_start_loc, rebased to 0, and the context-chunk plan.
  const int decodes = plan.num_decodes, prefills = plan.num_prefills;
  int32_t* prefill_qsl = i32(sec.prefill_query_start_loc);
  if (prefills > 0) {
    for (int p = 0; p <= prefills; ++p) prefill_qsl[p] = qsl[decodes + p] - qsl[decodes];
  }
  ContextChunkPlan chunks;
  chunks.workspace_size = cfg.context_chunk_workspace_size;
  chunks.num_chunks = plan.chunks.num_chunks;
  chunks.max_context_chunk = plan.chunks.max_context_chunk;
  chunks.num_prefills_with_context = plan.chunks.num_prefills_with_context;
  if (chunks.num_chunks > 0) {
    chunks.max_seq_lens.resize(size_t(chunks.num_chunks));
    chunks.seq_tot.resize(size_t(chunks.num_chunks));
    detail::fill_context_chunks(plan.chunks, {context_lens + decodes, size_t(prefills)},
                                cfg.context_chunk_workspace_size, i32(sec.chunk_starts), i32(sec.chunk_cu_seq_lens),
                                chunks.max_seq_lens.data(), chunks.seq_tot.data());
  }

  if (graph_build) {
    const size_t r = size_t(rows);
    storage->upload_ranges = {{sec.slot_mapping, size_t(plan.num_slots) * 8},
                              {sec.query_start_loc, (r + 1) * 4},
                              {sec.seq_start_loc, (r + 1) * 4},
                              {sec.seq_lens, r * 4},
                              {sec.context_lens, r * 4},
                              {sec.block_table, r * size_t(width) * 4}};
  }

  // Views.
  const detail::MetadataStorage& s = *storage;
  using detail::arena_view;
  MlaMetadata m;
  m.num_reqs = rows;
  m.num_actual_tokens = int(plan.num_tokens);
  m.num_decodes = decodes + (rows - plan.num_reqs);
  m.num_prefills = prefills;
  m.num_prefill_tokens = int(plan.num_tokens - plan.num_decode_tokens);
  // Seed: num_decode_tokens = batch_size - num_prefill_tokens under CUDA-graph padding.
  m.num_decode_tokens = graph_build ? rows - m.num_prefill_tokens : int(plan.num_decode_tokens);
  m.num_pad_reqs = rows - plan.num_reqs;
  m.max_query_len = plan.max_query_len;
  m.max_decode_query_len = plan.max_decode_query_len;
  m.max_prefill_seq_len = plan.max_prefill_seq_len;
  m.max_decode_seq_len = plan.max_decode_seq_len;
  m.block_size = cfg.block_size;
  m.use_cuda_graph = graph_build;
  m.is_profile_run = options.is_profile_run;
  m.context_chunk_workspace_size = cfg.context_chunk_workspace_size;
  m.device = Device::cpu();
  m.query_start_loc_cpu = m.query_start_loc = arena_view(s, sec.query_start_loc, DType::i32, {rows + 1});
  m.seq_start_loc_cpu = m.seq_start_loc = arena_view(s, sec.seq_start_loc, DType::i32, {rows + 1});
  m.seq_lens_cpu = m.seq_lens = arena_view(s, sec.seq_lens, DType::i32, {rows});
  m.context_lens_cpu = m.context_lens = arena_view(s, sec.context_lens, DType::i32, {rows});
  m.block_table_cpu = m.block_table = arena_view(s, sec.block_table, DType::i32, {rows, width});
  m.slot_mapping_cpu = m.slot_mapping = arena_view(s, sec.slot_mapping, DType::i64, {plan.num_slots});

  if (m.num_decodes > 0) {
    DecodeMetadata d;
    d.num_decodes = m.num_decodes;
    d.num_decode_tokens = m.num_decode_tokens;
    d.max_decode_query_len = m.max_decode_query_len;
    d.max_decode_seq_len = m.max_decode_seq_len;
    d.block_size = cfg.block_size;
    d.use_cuda_graph = graph_build;
    d.query_start_loc_cpu = d.query_start_loc = m.query_start_loc_cpu.narrow(0, 0, d.num_decodes + 1);
    d.seq_lens_cpu = d.seq_lens = m.seq_lens_cpu.narrow(0, 0, d.num_decodes);
    d.seq_start_loc_cpu = d.seq_start_loc = m.seq_start_loc_cpu.narrow(0, 0, d.num_decodes + 1);
    d.block_table_cpu = d.block_table = m.block_table_cpu.narrow(0, 0, d.num_decodes);
    // Decode tokens, padding included; a padded slot_mapping tail past the
    // decode tokens (v1 padding of a mixed batch) belongs to neither view.
    d.slot_mapping_cpu = d.slot_mapping = m.slot_mapping_cpu.narrow(0, 0, d.num_decode_tokens);
    m.decode = std::move(d);
  }
  if (prefills > 0) {
    PrefillMetadata p;
    p.num_prefills = prefills;
    p.num_prefill_tokens = m.num_prefill_tokens;
    p.max_query_len = plan.max_query_len;
    p.max_prefill_seq_len = plan.max_prefill_seq_len;
    p.block_size = cfg.block_size;
    p.query_start_loc_cpu = p.query_start_loc = arena_view(s, sec.prefill_query_start_loc, DType::i32, {prefills + 1});
    p.seq_lens_cpu = p.seq_lens = m.seq_lens_cpu.narrow(0, decodes, prefills);
    p.context_lens_cpu = p.context_lens = m.context_lens_cpu.narrow(0, decodes, prefills);
    p.seq_start_loc_cpu = p.seq_start_loc = m.seq_start_loc_cpu.narrow(0, decodes, prefills + 1);
    p.block_table_cpu = p.block_table = m.block_table_cpu.narrow(0, decodes, prefills);
    p.slot_mapping_cpu = p.slot_mapping = m.slot_mapping_cpu.narrow(0, m.num_decode_tokens, m.num_prefill_tokens);
    chunks.starts_cpu = chunks.starts = arena_view(s, sec.chunk_starts, DType::i32, {chunks.num_chunks, prefills});
    chunks.cu_seq_lens_cpu = chunks.cu_seq_lens =
        arena_view(s, sec.chunk_cu_seq_lens, DType::i32, {chunks.num_chunks, prefills + 1});
    p.chunks = std::move(chunks);
    m.prefill = std::move(p);
  }
  m.storage = std::move(storage);
  return m;
}

// ---- CommonAttentionMetadata checks --------------------------------------------

// Host copies of the common metadata's block table and slot mapping (when
// they live on a device) and the dtype/shape/consistency checks.
struct CommonHostArrays {
  OwnedTensor block_table_copy, slot_mapping_copy;
  Tensor block_table, slot_mapping;
};

void check_host_i32(const std::string& op, const char* name, const Tensor& t, int64_t size) {
  if (!t.defined() || !t.device().is_cpu() || t.dtype() != DType::i32 || t.dim() != 1 || t.size(0) != size ||
      !t.is_contiguous()) {
    throw ValueError(op + "argument '" + name + "' must be a contiguous host int32 tensor of shape [" +
                     std::to_string(size) + "], got " + (t.defined() ? t.describe() : std::string("no tensor")));
  }
}

CommonHostArrays check_common(const CommonAttentionMetadata& c) {
  const std::string op = "MlaMetadataBuilder.build: ";
  if (c.num_reqs < 0) throw ValueError(op + "num_reqs must be >= 0, got " + std::to_string(c.num_reqs));
  check_host_i32(op, "query_start_loc_cpu", c.query_start_loc_cpu, c.num_reqs + 1);
  check_host_i32(op, "seq_lens_cpu", c.seq_lens_cpu, c.num_reqs);
  check_host_i32(op, "num_computed_tokens_cpu", c.num_computed_tokens_cpu, c.num_reqs);
  CommonHostArrays h;
  const Tensor& bt = c.block_table_tensor;
  if (!bt.defined() || bt.dtype() != DType::i32 || bt.dim() != 2 || bt.size(0) < c.num_reqs ||
      !bt.is_last_dim_contiguous()) {
    throw ValueError(op + "argument 'block_table_tensor' must be an int32 tensor of shape [>= " +
                     std::to_string(c.num_reqs) + ", max_blocks] with contiguous rows, got " +
                     (bt.defined() ? bt.describe() : std::string("no tensor")));
  }
  const Tensor& sm = c.slot_mapping;
  if (!sm.defined() || sm.dtype() != DType::i64 || sm.dim() != 1 || sm.size(0) < c.num_actual_tokens ||
      !sm.is_contiguous()) {
    throw ValueError(op + "argument 'slot_mapping' must be a contiguous int64 tensor of shape [>= " +
                     std::to_string(c.num_actual_tokens) + "], got " +
                     (sm.defined() ? sm.describe() : std::string("no tensor")));
  }
  h.block_table = bt;
  if (!bt.device().is_cpu()) {
    const Tensor rows = bt.narrow(0, 0, c.num_reqs);
    if (!rows.is_contiguous()) throw ValueError(op + "a device 'block_table_tensor' must be contiguous, got " + bt.describe());
    h.block_table_copy = OwnedTensor::empty(rows.shape(), DType::i32);
    copy_tensor(rows, h.block_table_copy);
    h.block_table = h.block_table_copy;
  }
  h.slot_mapping = sm;
  if (!sm.device().is_cpu()) {
    h.slot_mapping_copy = OwnedTensor::empty(sm.shape(), DType::i64);
    copy_tensor(sm, h.slot_mapping_copy);
    h.slot_mapping = h.slot_mapping_copy;
  }

  const int32_t* qsl = c.query_start_loc_cpu.data_as<const int32_t>();
  const int32_t* seq_lens = c.seq_lens_cpu.data_as<const int32_t>();
  const int32_t* computed = c.num_computed_tokens_cpu.data_as<const int32_t>();
  if (qsl[0] != 0) throw ValueError(op + "query_start_loc_cpu[0] must be 0, got " + std::to_string(qsl[0]));
  if (qsl[c.num_reqs] != c.num_actual_tokens) {
    throw ValueError(op + "query_start_loc_cpu[num_reqs] = " + std::to_string(qsl[c.num_reqs]) +
                     " must equal num_actual_tokens " + std::to_string(c.num_actual_tokens));
  }
  int64_t max_query_len = 0;
  for (int r = 0; r < c.num_reqs; ++r) {
    const int64_t query_len = int64_t(qsl[r + 1]) - qsl[r];
    max_query_len = std::max(max_query_len, query_len);
    if (query_len > 0 && int64_t(seq_lens[r]) != int64_t(computed[r]) + query_len) {
      throw ValueError(op + "request " + std::to_string(r) + " has seq_lens_cpu " + std::to_string(seq_lens[r]) +
                       " != num_computed_tokens_cpu " + std::to_string(computed[r]) + " + query_len " +
                       std::to_string(query_len));
    }
  }
  if (c.num_reqs > 0 && max_query_len > 0 && max_query_len != c.max_query_len) {
    throw ValueError(op + "max_query_len " + std::to_string(c.max_query_len) +
                     " differs from the longest query of query_start_loc_cpu, " + std::to_string(max_query_len));
  }
  return h;
}

std::vector<int> default_capture_sizes(int max_batch_size) {
  std::vector<int> sizes;
  for (int s : {1, 2, 4}) {
    if (s < max_batch_size) sizes.push_back(s);
  }
  for (int s = 8; s < max_batch_size; s += 8) sizes.push_back(s);
  sizes.push_back(max_batch_size);
  return sizes;
}

}  // namespace

// ---- public -----------------------------------------------------------------------

std::vector<int> mla_supported_head_sizes() { return {576}; }

int64_t mla_context_chunk_workspace_size(int64_t max_model_len, int64_t max_num_seqs, int64_t block_size) {
  const std::string op = "mla_context_chunk_workspace_size: ";
  if (max_model_len <= 0) throw ValueError(op + "max_model_len must be > 0, got " + std::to_string(max_model_len));
  if (max_num_seqs <= 0) throw ValueError(op + "max_num_seqs must be > 0, got " + std::to_string(max_num_seqs));
  if (block_size <= 0) throw ValueError(op + "block_size must be > 0, got " + std::to_string(block_size));
  // Enough for 8 full-length requests or 4 pages per request, capped at
  // 128k tokens for long-context models (seed 002; its comment's "64k" is
  // stale, the code's 128 * 1024 is authoritative, docs/metadata.md).
  const int64_t seq_blocks = checked_mul(max_num_seqs, block_size, op + "max_num_seqs * block_size");
  const int64_t workspace =
      std::min(std::max(checked_mul(8, max_model_len, op + "8 * max_model_len"),
                        checked_mul(4, seq_blocks, op + "4 * max_num_seqs * block_size")),
               int64_t(128) * 1024);
  if (workspace < seq_blocks) {
    throw AssertionError("context_chunk_workspace_size >= scheduler_config.max_num_seqs * cache_config.block_size (" +
                         std::to_string(workspace) + " < " + std::to_string(max_num_seqs) + " * " +
                         std::to_string(block_size) + " = " + std::to_string(max_num_seqs * block_size) + ")");
  }
  return workspace;
}

MlaMetadataBuilder::MlaMetadataBuilder(MetadataBuilderConfig config) : config_(std::move(config)) {
  const std::string op = "MlaMetadataBuilder: ";
  if (detail::batch_invariant_from_env()) config_.batch_invariant = true;
  const MetadataBuilderConfig& c = config_;
  if (c.block_size <= 0) throw ValueError(op + "block_size must be > 0, got " + std::to_string(c.block_size));
  if (c.reorder_batch_threshold < 1) {
    throw ValueError(op + "reorder_batch_threshold must be >= 1, got " + std::to_string(c.reorder_batch_threshold));
  }
  if (c.context_chunk_workspace_size < 0) {
    throw ValueError(op + "context_chunk_workspace_size must be >= 0, got " +
                     std::to_string(c.context_chunk_workspace_size));
  }
  if ((c.chunked_prefill_enabled || c.enable_prefix_caching) && c.context_chunk_workspace_size == 0) {
    throw ValueError(op + "context_chunk_workspace_size must be > 0 when chunked_prefill_enabled or "
                          "enable_prefix_caching is set (size it with mla_context_chunk_workspace_size), got 0");
  }
  if (c.sliding_window && *c.sliding_window <= 0) {
    throw ValueError(op + "sliding_window must be > 0 when set, got " + std::to_string(*c.sliding_window));
  }
  if (c.head_dim) {
    const std::vector<int> supported = mla_supported_head_sizes();
    if (std::find(supported.begin(), supported.end(), *c.head_dim) == supported.end()) {
      // Seed text (docs/vllm.md); the seed builds it from two arguments, so Python
      // prints a tuple: this is the intended sentence.
      throw ValueError("Only [576] are supported for head_dim, received " + std::to_string(*c.head_dim) + ".");
    }
  }
  if (c.cudagraph) {
    CudaGraphConfig g = *c.cudagraph;
    if (g.max_batch_size <= 0) {
      throw ValueError(op + "cudagraph.max_batch_size must be > 0, got " + std::to_string(g.max_batch_size));
    }
    if (g.max_seq_len_to_capture <= 0) {
      throw ValueError(op + "cudagraph.max_seq_len_to_capture must be > 0, got " +
                       std::to_string(g.max_seq_len_to_capture));
    }
    if (g.max_blocks_per_seq < 0) {
      throw ValueError(op + "cudagraph.max_blocks_per_seq must be >= 0, got " + std::to_string(g.max_blocks_per_seq));
    }
    if (g.max_blocks_per_seq == 0) g.max_blocks_per_seq = int(cdiv(g.max_seq_len_to_capture, c.block_size));
    if (g.capture_sizes.empty()) g.capture_sizes = default_capture_sizes(g.max_batch_size);
    for (size_t i = 0; i < g.capture_sizes.size(); ++i) {
      const int s = g.capture_sizes[i];
      if (s < 1 || s > g.max_batch_size || (i > 0 && s <= g.capture_sizes[i - 1])) {
        throw ValueError(op + "cudagraph.capture_sizes must be strictly ascending within [1, max_batch_size " +
                         std::to_string(g.max_batch_size) + "]; entry " + std::to_string(i) + " is " +
                         std::to_string(s));
      }
    }
    config_.cudagraph = g;
    graph_ = detail::GraphBuffers::create(g);
  }
}

MlaMetadata MlaMetadataBuilder::build(std::span<const RequestSpec> requests, const BuildOptions& options) const {
  const SpecBatch batch(requests);
  const BatchPlan plan = plan_batch(config_, graph_.get(), batch, options);
  return fill_metadata(config_, graph_.get(), batch, options, plan);
}

MlaMetadata MlaMetadataBuilder::build(const CommonAttentionMetadata& common, int common_prefix_len,
                                      bool fast_build) const {
  return build(common, BuildOptions{}, common_prefix_len, fast_build);
}

MlaMetadata MlaMetadataBuilder::build(const CommonAttentionMetadata& common, const BuildOptions& options,
                                      int common_prefix_len, bool fast_build) const {
  const CommonHostArrays host = check_common(common);
  const CommonBatch batch(common, host.block_table, host.slot_mapping);
  const BatchPlan plan = plan_batch(config_, graph_.get(), batch, options);
  return fill_metadata(config_, graph_.get(), batch, options, plan);
}

bool MlaMetadataBuilder::reorder_batch(InputBatch& input_batch) const {
  return reorder_batch_to_split_decodes_and_prefills(input_batch, config_.reorder_batch_threshold);
}

bool MlaMetadataBuilder::can_run_in_cudagraph(const CommonAttentionMetadata& common) const {
  return common.max_query_len == 1;
}

MlaMetadata MlaMetadataBuilder::build_for_cudagraph_capture(const CommonAttentionMetadata& common) const {
  // Upstream MLA: capture is decode-only, one token per request.
  lattn_assert(common.num_reqs == common.num_actual_tokens,
               "MLA only supports decode-only full CUDAGraph capture. Make sure all cudagraph capture sizes <= "
               "max_num_seq. (num_reqs " +
                   std::to_string(common.num_reqs) + ", num_actual_tokens " +
                   std::to_string(common.num_actual_tokens) + ")");
  CommonAttentionMetadata decode_only = common;
  decode_only.max_query_len = 1;
  BuildOptions options;
  if (graph_) options.cudagraph_batch_size = common.num_reqs;
  return build(decode_only, options, 0, false);
}

bool MlaMetadataBuilder::use_cascade_attention(int, std::span<const int32_t>, int, int, bool, bool, int) const {
  return false;
}

std::optional<int> MlaMetadataBuilder::padded_batch_size(int num_reqs) const {
  if (!graph_ || num_reqs < 1) return std::nullopt;
  for (int s : config_.cudagraph->capture_sizes) {
    if (s >= num_reqs) return s;
  }
  return std::nullopt;
}

MlaMetadata MlaMetadataBuilder::build_for_cudagraph(std::span<const RequestSpec> requests,
                                                    std::optional<int> batch_size) const {
  if (!graph_) throw ValueError("MlaMetadataBuilder.build_for_cudagraph: MetadataBuilderConfig::cudagraph is not set");
  BuildOptions options;
  options.cudagraph_batch_size = batch_size ? batch_size : padded_batch_size(int(requests.size()));
  if (!options.cudagraph_batch_size) {
    throw ValueError("MlaMetadataBuilder.build_for_cudagraph: " + std::to_string(requests.size()) +
                     " requests exceed the largest captured batch size " +
                     std::to_string(config_.cudagraph->capture_sizes.back()));
  }
  return build(requests, options);
}

}  // namespace lattn
