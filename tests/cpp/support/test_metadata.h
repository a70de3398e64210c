// tests/cpp/support/test_metadata.h — a small, independent MlaMetadata
// builder for tests: the batch is given request by request (decodes first)
// with explicit block-table rows, and the context-chunk plan follows the
// seed's formula (SPEC §4.4) for a given workspace size. It does not use
// MlaMetadataBuilder, so attention tests do not depend on it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lattn/metadata.h"
#include "lattn/tensor.h"

namespace lattn::test {

struct RequestSpec {
  int context_len = 0;  // tokens already in the cache
  int query_len = 1;    // new tokens this step
};

struct StepLayout {
  std::vector<RequestSpec> requests;             // decodes first, then prefills
  int num_decodes = 0;
  int block_size = 16;
  std::vector<std::vector<int32_t>> block_table;  // per request; rows may be longer than needed
  int32_t block_table_pad = 0;                    // value of the columns past a row's end
  int64_t workspace_rows = 0;                     // context-chunk workspace (0: no chunk plan)
  int pad_tokens = 0;                             // extra token rows with PAD_SLOT_ID (CUDA-graph padding)
};

// MlaMetadata with the arrays it views (host, plus device copies after to_device).
class TestMetadata {
 public:
  explicit TestMetadata(const StepLayout& layout);
  TestMetadata(const TestMetadata&) = delete;
  TestMetadata& operator=(const TestMetadata&) = delete;
  const MlaMetadata& metadata() const { return md_; }
  MlaMetadata& metadata() { return md_; }
  int64_t num_tokens() const { return md_.num_actual_tokens + pad_tokens_; }
  // Copies every index array to `device` and points the device views there.
  void to_device(Device device);

 private:
  Tensor keep(OwnedTensor t);  // stores t, returns its view
  MlaMetadata md_;
  int pad_tokens_ = 0;
  std::vector<std::unique_ptr<OwnedTensor>> arrays_;
};

// The seed's context-chunk plan (SPEC §4.4) for the prefill rows, as plain
// values (row-major [num_chunks, num_prefills] / [num_chunks, num_prefills+1]).
// Throws AssertionError as the seed when the workspace cannot hold one page
// per prefill with context. num_chunks uses the batch-wide max context (Edge 2).
struct ChunkPlanValues {
  int num_chunks = 0;
  int64_t max_context_chunk = 0;
  std::vector<int32_t> starts, cu_seq_lens, max_seq_lens, seq_tot;
};
ChunkPlanValues plan_context_chunks(const std::vector<int>& prefill_context_lens, int batch_max_context,
                                    int64_t workspace_rows, int block_size);

}  // namespace lattn::test
