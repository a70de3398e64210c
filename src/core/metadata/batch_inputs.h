// src/core/metadata/batch_inputs.h — the two batch descriptions the metadata
// builder accepts (a list of RequestSpec, vLLM's CommonAttentionMetadata),
// behind one accessor shape, so validation and fill are written once for
// both (internal).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "lattn/common_metadata.h"
#include "lattn/metadata.h"
#include "lattn/tensor.h"

namespace lattn::detail {

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
  std::span<const int32_t> block_row(int r) const { return {block_table_ + r * block_row_stride_, size_t(width_)}; }
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

// Host copies of the common metadata's block table and slot mapping (when
// they live on a device), made by check_common.
struct CommonHostArrays {
  OwnedTensor block_table_copy, slot_mapping_copy;
  Tensor block_table, slot_mapping;
};

// Checks the common metadata's host arrays (dtype, shape, query_start_loc /
// seq_lens / num_computed_tokens consistency; ValueError naming the
// argument) and copies a device block table / slot mapping to the host.
CommonHostArrays check_common(const CommonAttentionMetadata& c);

}  // namespace lattn::detail
