#include "support/test_metadata.h"

#include <algorithm>
#include <numeric>

#include "lattn/errors.h"

namespace lattn::test {
namespace {

OwnedTensor int32_array(const std::vector<int32_t>& values, std::initializer_list<int64_t> shape) {
  OwnedTensor t = OwnedTensor::empty(shape, DType::i32);
  std::copy(values.begin(), values.end(), t.data_as<int32_t>());
  return t;
}

}  // namespace

ChunkPlanValues plan_context_chunks(const std::vector<int>& context_lens, int batch_max_context,
                                    int64_t workspace_rows, int block_size) {
  ChunkPlanValues plan;
  const int64_t with_context = std::count_if(context_lens.begin(), context_lens.end(), [](int c) { return c > 0; });
  if (with_context == 0) return plan;
  int64_t max_chunk = workspace_rows / with_context;  // an equal share per prefill with context
  max_chunk = max_chunk / block_size * block_size;    // round_down to the page size (gather_cache alignment)
  lattn_assert(max_chunk > 0, "max_context_chunk > 0");
  plan.max_context_chunk = max_chunk;
  plan.num_chunks = int((batch_max_context + max_chunk - 1) / max_chunk);
  for (int i = 0; i < plan.num_chunks; ++i) {
    int32_t total = 0, longest = 0;
    plan.cu_seq_lens.push_back(0);
    for (int context : context_lens) {
      const int64_t start = i * max_chunk;
      const int64_t end = std::min<int64_t>(context, start + max_chunk);
      const int32_t len = int32_t(std::max<int64_t>(end - start, 0));
      plan.starts.push_back(int32_t(start));
      total += len;
      longest = std::max(longest, len);
      plan.cu_seq_lens.push_back(total);
    }
    plan.seq_tot.push_back(total);
    plan.max_seq_lens.push_back(longest);
    lattn_assert(total <= workspace_rows, "max(context_chunk_seq_tot) <= workspace");
  }
  return plan;
}

Tensor TestMetadata::keep(OwnedTensor t) {
  arrays_.push_back(std::make_unique<OwnedTensor>(std::move(t)));
  return arrays_.back()->tensor();
}

TestMetadata::TestMetadata(const StepLayout& layout) : pad_tokens_(layout.pad_tokens) {
  const int num_reqs = int(layout.requests.size());
  const int nd = layout.num_decodes, np = num_reqs - nd;
  const int bs = layout.block_size;
  std::vector<int32_t> qsl{0}, seq_lens, context_lens;
  for (const RequestSpec& r : layout.requests) {
    qsl.push_back(qsl.back() + r.query_len);
    seq_lens.push_back(r.context_len + r.query_len);
    context_lens.push_back(r.context_len);
  }
  size_t max_blocks = 1;
  for (const auto& row : layout.block_table) max_blocks = std::max(max_blocks, row.size());
  std::vector<int32_t> table(size_t(num_reqs) * max_blocks, layout.block_table_pad);
  for (int r = 0; r < num_reqs; ++r) {
    std::copy(layout.block_table[size_t(r)].begin(), layout.block_table[size_t(r)].end(),
              table.begin() + ptrdiff_t(size_t(r) * max_blocks));
  }
  const int num_actual = qsl.back();
  std::vector<int64_t> slots(size_t(num_actual + layout.pad_tokens), PAD_SLOT_ID);
  for (int r = 0; r < num_reqs; ++r) {
    for (int j = 0; j < layout.requests[size_t(r)].query_len; ++j) {
      const int64_t pos = context_lens[size_t(r)] + j;
      slots[size_t(qsl[size_t(r)] + j)] = int64_t(table[size_t(r) * max_blocks + size_t(pos / bs)]) * bs + pos % bs;
    }
  }

  md_.num_reqs = num_reqs;
  md_.num_actual_tokens = num_actual;
  md_.num_decodes = nd;
  md_.num_prefills = np;
  md_.num_decode_tokens = qsl[size_t(nd)];
  md_.num_prefill_tokens = num_actual - md_.num_decode_tokens;
  md_.max_query_len = 0;
  for (const RequestSpec& r : layout.requests) md_.max_query_len = std::max(md_.max_query_len, r.query_len);
  md_.block_size = bs;
  md_.context_chunk_workspace_size = layout.workspace_rows;
  md_.query_start_loc_cpu = md_.query_start_loc = keep(int32_array(qsl, {num_reqs + 1}));
  md_.seq_lens_cpu = md_.seq_lens = keep(int32_array(seq_lens, {num_reqs}));
  md_.context_lens_cpu = md_.context_lens = keep(int32_array(context_lens, {num_reqs}));
  md_.block_table_cpu = md_.block_table = keep(int32_array(table, {num_reqs, int64_t(max_blocks)}));
  OwnedTensor slot_tensor = OwnedTensor::empty({int64_t(slots.size())}, DType::i64);
  std::copy(slots.begin(), slots.end(), slot_tensor.data_as<int64_t>());
  md_.slot_mapping_cpu = md_.slot_mapping = keep(std::move(slot_tensor));

  if (nd > 0) {
    DecodeMetadata d;
    d.num_decodes = nd;
    d.num_decode_tokens = md_.num_decode_tokens;
    d.block_size = bs;
    d.max_decode_query_len = 1;
    for (int r = 0; r < nd; ++r) {
      d.max_decode_query_len = std::max(d.max_decode_query_len, layout.requests[size_t(r)].query_len);
      d.max_decode_seq_len = std::max(d.max_decode_seq_len, int(seq_lens[size_t(r)]));
    }
    d.query_start_loc_cpu = d.query_start_loc = md_.query_start_loc_cpu.narrow(0, 0, nd + 1);  // starts at 0 already
    d.seq_lens_cpu = d.seq_lens = md_.seq_lens_cpu.narrow(0, 0, nd);
    d.block_table_cpu = d.block_table = md_.block_table_cpu.narrow(0, 0, nd);
    md_.decode = d;
  }
  if (np > 0) {
    PrefillMetadata p;
    p.num_prefills = np;
    p.num_prefill_tokens = md_.num_prefill_tokens;
    p.block_size = bs;
    std::vector<int32_t> rebased;
    for (int r = nd; r <= num_reqs; ++r) rebased.push_back(qsl[size_t(r)] - qsl[size_t(nd)]);
    p.query_start_loc_cpu = p.query_start_loc = keep(int32_array(rebased, {np + 1}));
    p.seq_lens_cpu = p.seq_lens = md_.seq_lens_cpu.narrow(0, nd, np);
    p.context_lens_cpu = p.context_lens = md_.context_lens_cpu.narrow(0, nd, np);
    p.block_table_cpu = p.block_table = md_.block_table_cpu.narrow(0, nd, np);
    std::vector<int> prefill_contexts;
    for (int r = nd; r < num_reqs; ++r) {
      p.max_query_len = std::max(p.max_query_len, layout.requests[size_t(r)].query_len);
      p.max_prefill_seq_len = std::max(p.max_prefill_seq_len, int(seq_lens[size_t(r)]));
      prefill_contexts.push_back(context_lens[size_t(r)]);
    }
    const int batch_max_context = *std::max_element(context_lens.begin(), context_lens.end());
    const bool any_prefill_context = *std::max_element(prefill_contexts.begin(), prefill_contexts.end()) > 0;
    if (any_prefill_context) {
      const ChunkPlanValues plan = plan_context_chunks(prefill_contexts, batch_max_context, layout.workspace_rows, bs);
      p.chunks.num_chunks = plan.num_chunks;
      p.chunks.max_context_chunk = plan.max_context_chunk;
      p.chunks.max_seq_lens = plan.max_seq_lens;
      p.chunks.seq_tot = plan.seq_tot;
      p.chunks.starts_cpu = p.chunks.starts = keep(int32_array(plan.starts, {plan.num_chunks, np}));
      p.chunks.cu_seq_lens_cpu = p.chunks.cu_seq_lens = keep(int32_array(plan.cu_seq_lens, {plan.num_chunks, np + 1}));
    }
    md_.prefill = p;
  }
}

void TestMetadata::to_device(Device device) {
  md_.device = device;
  if (device.is_cpu()) return;
  auto upload = [&](const Tensor& host) {
    if (!host.defined()) return Tensor();
    OwnedTensor contiguous = OwnedTensor::empty(host.shape(), host.dtype());
    copy_host(host, contiguous.tensor());
    OwnedTensor dev = OwnedTensor::empty(host.shape(), host.dtype(), device);
    copy_tensor(contiguous.tensor(), dev.tensor());
    return keep(std::move(dev));
  };
  md_.query_start_loc = upload(md_.query_start_loc_cpu);
  md_.seq_lens = upload(md_.seq_lens_cpu);
  md_.context_lens = upload(md_.context_lens_cpu);
  md_.block_table = upload(md_.block_table_cpu);
  md_.slot_mapping = upload(md_.slot_mapping_cpu);
  if (md_.decode) {
    DecodeMetadata& d = *md_.decode;
    d.query_start_loc = upload(d.query_start_loc_cpu);
    d.seq_lens = upload(d.seq_lens_cpu);
    d.block_table = upload(d.block_table_cpu);
  }
  if (md_.prefill) {
    PrefillMetadata& p = *md_.prefill;
    p.query_start_loc = upload(p.query_start_loc_cpu);
    p.seq_lens = upload(p.seq_lens_cpu);
    p.context_lens = upload(p.context_lens_cpu);
    p.block_table = upload(p.block_table_cpu);
    p.chunks.starts = upload(p.chunks.starts_cpu);
    p.chunks.cu_seq_lens = upload(p.chunks.cu_seq_lens_cpu);
  }
}

}  // namespace lattn::test
