// Checks of a CommonAttentionMetadata batch description (see batch_inputs.h).
#include "core/metadata/batch_inputs.h"

#include <string>

#include "lattn/errors.h"

namespace lattn::detail {
namespace {

void check_host_i32(const std::string& op, const char* name, const Tensor& t, int64_t size) {
  if (!t.defined() || !t.device().is_cpu() || t.dtype() != DType::i32 || t.dim() != 1 || t.size(0) != size ||
      !t.is_contiguous()) {
    throw ValueError(op + "argument '" + name + "' must be a contiguous host int32 tensor of shape [" +
                     std::to_string(size) + "], got " + (t.defined() ? t.describe() : std::string("no tensor")));
  }
}

}  // namespace

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
    throw ValueError(
        op + "argument 'block_table_tensor' must be an int32 tensor of shape [>= " + std::to_string(c.num_reqs) +
        ", max_blocks] with contiguous rows, got " + (bt.defined() ? bt.describe() : std::string("no tensor")));
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
    if (!rows.is_contiguous())
      throw ValueError(op + "a device 'block_table_tensor' must be contiguous, got " + bt.describe());
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

}  // namespace lattn::detail
