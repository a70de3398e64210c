// Helpers for metadata tests (see metadata_test_util.h).
#include "support/metadata_test_util.h"

#include <algorithm>
#include <stdexcept>

namespace lattn::test {

std::vector<int64_t> to_vec(const Tensor& t) {
  if (!t.device().is_cpu() || t.dim() != 1) throw std::invalid_argument("to_vec: needs a 1-D host tensor");
  std::vector<int64_t> v(size_t(t.size(0)));
  for (int64_t i = 0; i < t.size(0); ++i) {
    const void* p = t.ptr_at({i});
    v[size_t(i)] = t.dtype() == DType::i64 ? *static_cast<const int64_t*>(p) : *static_cast<const int32_t*>(p);
  }
  return v;
}

std::vector<std::vector<int64_t>> to_rows(const Tensor& t) {
  if (!t.device().is_cpu() || t.dim() != 2) throw std::invalid_argument("to_rows: needs a 2-D host tensor");
  std::vector<std::vector<int64_t>> rows;
  for (int64_t i = 0; i < t.size(0); ++i) rows.push_back(to_vec(t.select(0, i)));
  return rows;
}

CommonMetadataArrays make_common(std::span<const RequestSpec> requests, int block_size, int64_t width,
                                 int64_t slot_capacity) {
  CommonMetadataArrays a;
  const int num_reqs = int(requests.size());
  if (width == 0) {
    for (const RequestSpec& r : requests) width = std::max<int64_t>(width, int64_t(r.block_table.size()));
  }
  a.width = width;
  a.query_start_loc.push_back(0);
  int max_query_len = 0;
  for (const RequestSpec& r : requests) {
    a.query_start_loc.push_back(a.query_start_loc.back() + r.query_len);
    a.seq_lens.push_back(r.num_computed_tokens + r.query_len);
    a.num_computed_tokens.push_back(r.num_computed_tokens);
    max_query_len = std::max(max_query_len, r.query_len);
    std::vector<int32_t> row = r.block_table;
    row.resize(size_t(width), 0);
    a.block_table.insert(a.block_table.end(), row.begin(), row.end());
    for (int64_t t = r.num_computed_tokens; t < r.num_computed_tokens + r.query_len; ++t) {
      a.slot_mapping.push_back(int64_t(r.block_table[size_t(t / block_size)]) * block_size + t % block_size);
    }
  }
  const int num_tokens = a.query_start_loc.back();
  if (slot_capacity == 0) slot_capacity = num_tokens;
  a.slot_mapping.resize(size_t(slot_capacity), 12345);  // junk the constructor must overwrite with -1
  Tensor qsl(a.query_start_loc.data(), DType::i32, {num_reqs + 1});
  Tensor seq_lens(a.seq_lens.data(), DType::i32, {num_reqs});
  Tensor computed(a.num_computed_tokens.data(), DType::i32, {num_reqs});
  Tensor block_table(a.block_table.data(), DType::i32, {num_reqs, width});
  Tensor slots(a.slot_mapping.data(), DType::i64, {slot_capacity});
  a.common = CommonAttentionMetadata(qsl, qsl, seq_lens, seq_lens, computed, num_reqs, num_tokens, max_query_len,
                                     block_table, slots);
  return a;
}

}  // namespace lattn::test
