// In-place advance of a decode-only metadata (see lattn/advance_step.h).
// Every check runs before the first write, so a refused call changes nothing.
#include "lattn/advance_step.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/metadata/metadata_views.h"
#include "core/ops/device_ops.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

std::string shape1(int64_t n) { return "(" + std::to_string(n) + ", )"; }

// "assert <expression>" failed, with the values that made it fail.
void seed_assert(bool ok, const std::string& expression, const std::string& values) {
  if (!ok) throw AssertionError(expression + " (" + values + ")");
}

void check_index_tensor(const char* name, const Tensor& t, int64_t min_size, bool allow_column) {
  const bool shape_ok = t.defined() && (t.dim() == 1 || (allow_column && t.dim() == 2 && t.size(1) == 1)) &&
                        t.size(0) >= min_size && t.is_contiguous();
  if (!shape_ok || t.dtype() != DType::i64) {
    throw ValueError(std::string("advance_step: argument '") + name + "' must be a contiguous int64 tensor of [>= " +
                     std::to_string(min_size) + "]" + (allow_column ? " or [n, 1]" : "") + " entries, got " +
                     (t.defined() ? t.describe() : std::string("no tensor")));
  }
}

// Copies n int64 values between a host array and a tensor on any device.
void read_i64(const Tensor& src, int64_t* dst, int64_t n) {
  if (n == 0) return;
  if (src.device().is_cpu()) {
    std::memcpy(dst, src.data(), size_t(n) * 8);
  } else {
    detail::device_ops(src.device()).memcpy(dst, Device::cpu(), src.data(), src.device(), size_t(n) * 8, nullptr);
  }
}
void write_i64(const int64_t* src, const Tensor& dst, int64_t n, Stream stream) {
  if (n == 0) return;
  if (dst.device().is_cpu()) {
    std::memcpy(dst.data(), src, size_t(n) * 8);
  } else {
    detail::device_ops(dst.device()).memcpy(dst.data(), dst.device(), src, Device::cpu(), size_t(n) * 8, stream);
  }
}

}  // namespace

void advance_step(MlaMetadata& m, const Tensor& sampled_token_ids, const Tensor& input_tokens,
                  const Tensor& input_positions, int block_size, int num_seqs, int num_queries,
                  bool turn_prefills_into_decodes, Stream stream) {
  const std::string n_seqs = "num_seqs=" + std::to_string(num_seqs);
  const std::string n_queries = "num_queries=" + std::to_string(num_queries);
  if (!m.storage) throw ValueError("advance_step: the metadata has no storage (it was not made by MlaMetadataBuilder)");
  if (num_queries < 0) throw ValueError("advance_step: num_queries must be >= 0, got " + std::to_string(num_queries));

  // ---- the seed's assertions, in order, on the state after the optional
  // prefill -> decode conversion ----------------------------------------------
  if (num_seqs != num_queries) seed_assert(num_seqs > num_queries, "num_seqs > num_queries", n_seqs + ", " + n_queries);
  int num_decode_tokens = m.num_decode_tokens, num_prefills = m.num_prefills;
  int num_prefill_tokens = m.num_prefill_tokens, max_prefill_seq_len = m.max_prefill_seq_len;
  int max_query_len = m.max_query_len;
  int64_t slot_mapping_len = m.slot_mapping_cpu.size(0);
  const int32_t* seq_lens_host = m.seq_lens_cpu.data_as<const int32_t>();
  const int64_t num_rows = m.seq_lens_cpu.size(0);
  if (turn_prefills_into_decodes) {
    seed_assert(num_decode_tokens + num_prefills == num_seqs, "self.num_decode_tokens + self.num_prefills == num_seqs",
                "num_decode_tokens=" + std::to_string(num_decode_tokens) +
                    ", num_prefills=" + std::to_string(num_prefills) + ", " + n_seqs);
    num_decode_tokens += num_prefills;
    num_prefills = num_prefill_tokens = max_prefill_seq_len = 0;
    max_query_len = 1;
    slot_mapping_len = std::min<int64_t>(slot_mapping_len, num_seqs);  // slot_mapping[:num_seqs]
  } else {
    const int32_t max_seq_len = num_rows > 0 ? *std::max_element(seq_lens_host, seq_lens_host + num_rows) : 0;
    seed_assert(m.max_decode_seq_len == max_seq_len, "self.max_decode_seq_len == max(self.seq_lens)",
                "max_decode_seq_len=" + std::to_string(m.max_decode_seq_len) +
                    ", max(seq_lens)=" + std::to_string(max_seq_len));
  }
  seed_assert(num_prefills == 0, "self.num_prefills == 0", "num_prefills=" + std::to_string(num_prefills));
  seed_assert(num_prefill_tokens == 0, "self.num_prefill_tokens == 0",
              "num_prefill_tokens=" + std::to_string(num_prefill_tokens));
  seed_assert(num_decode_tokens == num_seqs, "self.num_decode_tokens == num_seqs",
              "num_decode_tokens=" + std::to_string(num_decode_tokens) + ", " + n_seqs);
  seed_assert(slot_mapping_len == num_seqs, "self.slot_mapping.shape == " + shape1(num_seqs),
              "slot_mapping.shape=" + shape1(slot_mapping_len));
  seed_assert(num_rows == num_seqs, "len(self.seq_lens) == num_seqs",
              "len(seq_lens)=" + std::to_string(num_rows) + ", " + n_seqs);
  seed_assert(m.seq_lens.defined() && m.seq_lens.size(0) == num_seqs,
              "self.seq_lens_tensor.shape == " + shape1(num_seqs),
              "seq_lens_tensor.shape=" + shape1(m.seq_lens.defined() ? m.seq_lens.size(0) : 0));
  seed_assert(max_query_len == 1, "self.max_query_len == 1", "max_query_len=" + std::to_string(max_query_len));
  seed_assert(max_prefill_seq_len == 0, "self.max_prefill_seq_len == 0",
              "max_prefill_seq_len=" + std::to_string(max_prefill_seq_len));
  const int real_reqs = m.num_reqs - m.num_pad_reqs;
  seed_assert(m.query_start_loc_cpu.size(0) == int64_t(num_seqs) + 1 && real_reqs == num_queries,
              "self.query_start_loc.shape == " + shape1(int64_t(num_queries) + 1),
              "lattn pads query_start_loc to num_seqs + 1 = " + std::to_string(m.query_start_loc_cpu.size(0)) +
                  " entries; real requests " + std::to_string(real_reqs) + ", " + n_queries);
  seed_assert(m.seq_start_loc_cpu.size(0) == int64_t(num_seqs) + 1,
              "self.seq_start_loc.shape == " + shape1(num_seqs + 1),
              "seq_start_loc.shape=" + shape1(m.seq_start_loc_cpu.size(0)));
  seed_assert(m.context_lens_cpu.size(0) == num_seqs && real_reqs == num_queries,
              "self.context_lens_tensor.shape == " + shape1(num_queries),
              "lattn pads context_lens to num_seqs = " + std::to_string(m.context_lens_cpu.size(0)) +
                  " entries; real requests " + std::to_string(real_reqs) + ", " + n_queries);
  seed_assert(m.block_table_cpu.size(0) == num_seqs, "self.block_tables.shape[0] == num_seqs",
              "block_tables.shape[0]=" + std::to_string(m.block_table_cpu.size(0)) + ", " + n_seqs);

  // ---- arguments ---------------------------------------------------------------
  if (block_size != m.block_size) {
    throw ValueError("advance_step: block_size " + std::to_string(block_size) +
                     " differs from the metadata's block_size " + std::to_string(m.block_size));
  }
  check_index_tensor("sampled_token_ids", sampled_token_ids, num_queries, true);
  check_index_tensor("input_tokens", input_tokens, num_seqs, false);
  check_index_tensor("input_positions", input_positions, num_seqs, false);
  for (const Tensor* t : {&sampled_token_ids, &input_tokens, &input_positions}) {
    if (!t->device().is_cpu() && !(t->device() == m.device)) {
      throw ValueError("advance_step: tensors must be on the host or on the metadata's device " +
                       device_name(m.device) + ", got " + t->describe());
    }
  }
  const int64_t width = m.block_table_cpu.size(1);
  const int32_t* table = m.block_table_cpu.data_as<const int32_t>();
  for (int q = 0; q < num_queries; ++q) {
    const int64_t s = seq_lens_host[q];
    if (s / block_size >= width || table[q * width + s / block_size] < 0) {
      throw ValueError("advance_step: request " + std::to_string(q) + " writes position " + std::to_string(s) +
                       ", which needs block-table entry " + std::to_string(s / block_size) + ", but its row has " +
                       std::to_string(width) + " entries (or a negative id there)");
    }
  }
  std::vector<int64_t> sampled(static_cast<size_t>(num_queries));
  read_i64(sampled_token_ids, sampled.data(), num_queries);

  // ---- writes ------------------------------------------------------------------------
  int32_t* seq_lens = m.seq_lens_cpu.data_as<int32_t>();
  int32_t* context_lens = m.context_lens_cpu.data_as<int32_t>();
  int32_t* qsl = m.query_start_loc_cpu.data_as<int32_t>();
  int32_t* ssl = m.seq_start_loc_cpu.data_as<int32_t>();
  int64_t* slots = m.slot_mapping_cpu.data_as<int64_t>();
  std::vector<int64_t> tokens(size_t(num_seqs), 0), positions(size_t(num_seqs), 0);
  for (int q = 0; q < num_queries; ++q) {
    const int64_t s = seq_lens[q];
    tokens[size_t(q)] = sampled[size_t(q)];
    positions[size_t(q)] = s;
    slots[q] = int64_t(table[q * width + s / block_size]) * block_size + s % block_size;
    seq_lens[q] = int32_t(s + 1);
    context_lens[q] = int32_t(s);
  }
  for (int r = num_queries; r < num_seqs; ++r) slots[r] = PAD_SLOT_ID;
  qsl[0] = ssl[0] = 0;
  for (int r = 0; r < num_seqs; ++r) {
    qsl[r + 1] = r + 1;
    ssl[r + 1] = ssl[r] + seq_lens[r];
  }
  const int max_seq_len = num_seqs > 0 ? *std::max_element(seq_lens, seq_lens + num_seqs) : 0;

  if (turn_prefills_into_decodes) {
    m.num_decodes = m.num_reqs;
    m.num_prefills = 0;
    m.num_decode_tokens = num_seqs;
    m.num_prefill_tokens = 0;
    m.max_prefill_seq_len = 0;
    m.max_query_len = 1;
    m.slot_mapping_cpu = m.slot_mapping_cpu.narrow(0, 0, num_seqs);
    m.prefill.reset();
  }
  m.max_decode_seq_len = max_seq_len;
  m.max_decode_query_len = 1;
  // The decode view over the new lengths, with fresh plans: a new step to plan.
  if (turn_prefills_into_decodes || m.decode) m.decode = detail::make_decode_view(m);
  // Device views: re-upload into the same device memory (or alias the host).
  m.to_device(m.device, stream);
  write_i64(tokens.data(), input_tokens, num_seqs, stream);
  write_i64(positions.data(), input_positions, num_seqs, stream);
}

}  // namespace lattn
