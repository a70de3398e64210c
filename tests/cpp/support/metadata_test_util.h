// tests/cpp/support/metadata_test_util.h — reading index tensors back and
// making CommonAttentionMetadata from request lists, for metadata tests.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lattn/metadata.h"
#include "lattn/tensor.h"

namespace lattn::test {

// Host int32/int64 tensor (1-D, any stride) as a vector.
std::vector<int64_t> to_vec(const Tensor& t);
// Host 2-D int32 tensor as rows.
std::vector<std::vector<int64_t>> to_rows(const Tensor& t);

// The arrays behind a CommonAttentionMetadata made from request specs (what a
// v1 runner keeps): block table right-padded with 0 to `width` (0 = longest
// row), slot_mapping of `slot_capacity` entries (0 = the token count) filled
// from the block tables.
struct CommonMetadataArrays {
  std::vector<int32_t> query_start_loc, seq_lens, num_computed_tokens, block_table;
  std::vector<int64_t> slot_mapping;
  int64_t width = 0;
  CommonAttentionMetadata common;  // views of the vectors above (host only)
};
CommonMetadataArrays make_common(std::span<const RequestSpec> requests, int block_size, int64_t width = 0,
                                 int64_t slot_capacity = 0);

}  // namespace lattn::test
