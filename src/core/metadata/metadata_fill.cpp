// Pass 2 of a metadata build: arena layout, fill and views (see
// metadata_fill.h). One allocation per build (the arena), none per request.
#include "core/metadata/metadata_fill.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/metadata/metadata_storage.h"
#include "core/metadata/metadata_views.h"
#include "core/metadata/slot_mapping.h"

namespace lattn::detail {
namespace {

// Arena offsets of one build.
struct Sections {
  size_t query_start_loc, seq_start_loc, seq_lens, context_lens, block_table, slot_mapping;
  size_t prefill_query_start_loc, chunk_starts, chunk_cu_seq_lens;
};

Sections lay_out(ArenaLayout& layout, const BatchPlan& plan) {
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

Sections graph_sections(const GraphBuffers& g) {
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
MlaMetadata fill_metadata_impl(const MetadataBuilderConfig& cfg, const GraphBuffers* graph, const Batch& batch,
                               const BuildOptions& options, const BatchPlan& plan) {
  const bool graph_build = options.cudagraph_batch_size.has_value();
  std::shared_ptr<MetadataStorage> storage;
  Sections sec;
  if (graph_build) {
    storage = graph->storage;
    sec = graph_sections(*graph);
  } else {
    storage = std::make_shared<MetadataStorage>();
    ArenaLayout layout;
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
      write_slots(out, seq_len, context_len, start_idx, cfg.block_size, row.data());
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
    fill_context_chunks(plan.chunks, {context_lens + decodes, size_t(prefills)}, cfg.context_chunk_workspace_size,
                        i32(sec.chunk_starts), i32(sec.chunk_cu_seq_lens), chunks.max_seq_lens.data(),
                        chunks.seq_tot.data());
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
  const MetadataStorage& s = *storage;
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

  if (m.num_decodes > 0) m.decode = make_decode_view(m);
  if (prefills > 0) {
    chunks.starts_cpu = chunks.starts = arena_view(s, sec.chunk_starts, DType::i32, {chunks.num_chunks, prefills});
    chunks.cu_seq_lens_cpu = chunks.cu_seq_lens =
        arena_view(s, sec.chunk_cu_seq_lens, DType::i32, {chunks.num_chunks, prefills + 1});
    m.prefill =
        make_prefill_view(m, arena_view(s, sec.prefill_query_start_loc, DType::i32, {prefills + 1}), std::move(chunks));
  }
  m.storage = std::move(storage);
  return m;
}

}  // namespace

MlaMetadata fill_metadata(const MetadataBuilderConfig& cfg, const GraphBuffers* graph, const SpecBatch& batch,
                          const BuildOptions& options, const BatchPlan& plan) {
  return fill_metadata_impl(cfg, graph, batch, options, plan);
}

MlaMetadata fill_metadata(const MetadataBuilderConfig& cfg, const GraphBuffers* graph, const CommonBatch& batch,
                          const BuildOptions& options, const BatchPlan& plan) {
  return fill_metadata_impl(cfg, graph, batch, options, plan);
}

}  // namespace lattn::detail
