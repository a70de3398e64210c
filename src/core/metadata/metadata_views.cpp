// The decode and prefill views of an MlaMetadata (see metadata_views.h).
#include "core/metadata/metadata_views.h"

#include <utility>

namespace lattn::detail {

DecodeMetadata make_decode_view(const MlaMetadata& m) {
  DecodeMetadata d;
  d.num_decodes = m.num_decodes;
  d.num_decode_tokens = m.num_decode_tokens;
  d.max_decode_query_len = m.max_decode_query_len;
  d.max_decode_seq_len = m.max_decode_seq_len;
  d.block_size = m.block_size;
  d.use_cuda_graph = m.use_cuda_graph;
  d.query_start_loc_cpu = d.query_start_loc = m.query_start_loc_cpu.narrow(0, 0, d.num_decodes + 1);
  d.seq_lens_cpu = d.seq_lens = m.seq_lens_cpu.narrow(0, 0, d.num_decodes);
  d.seq_start_loc_cpu = d.seq_start_loc = m.seq_start_loc_cpu.narrow(0, 0, d.num_decodes + 1);
  d.block_table_cpu = d.block_table = m.block_table_cpu.narrow(0, 0, d.num_decodes);
  // Decode tokens, padding included; a padded slot_mapping tail past the
  // decode tokens (v1 padding of a mixed batch) belongs to neither view.
  d.slot_mapping_cpu = d.slot_mapping = m.slot_mapping_cpu.narrow(0, 0, d.num_decode_tokens);
  return d;
}

PrefillMetadata make_prefill_view(const MlaMetadata& m, const Tensor& rebased_query_start_loc,
                                  ContextChunkPlan chunks) {
  const int decodes = m.num_decodes, prefills = m.num_prefills;
  PrefillMetadata p;
  p.num_prefills = prefills;
  p.num_prefill_tokens = m.num_prefill_tokens;
  p.max_query_len = m.max_query_len;
  p.max_prefill_seq_len = m.max_prefill_seq_len;
  p.block_size = m.block_size;
  p.query_start_loc_cpu = p.query_start_loc = rebased_query_start_loc;
  p.seq_lens_cpu = p.seq_lens = m.seq_lens_cpu.narrow(0, decodes, prefills);
  p.context_lens_cpu = p.context_lens = m.context_lens_cpu.narrow(0, decodes, prefills);
  p.seq_start_loc_cpu = p.seq_start_loc = m.seq_start_loc_cpu.narrow(0, decodes, prefills + 1);
  p.block_table_cpu = p.block_table = m.block_table_cpu.narrow(0, decodes, prefills);
  p.slot_mapping_cpu = p.slot_mapping = m.slot_mapping_cpu.narrow(0, m.num_decode_tokens, m.num_prefill_tokens);
  p.chunks = std::move(chunks);
  return p;
}

}  // namespace lattn::detail
