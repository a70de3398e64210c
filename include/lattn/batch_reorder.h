// lattn/batch_reorder.h — putting decodes before prefills, and finding the
// boundary of a reordered batch (seed 004, docs/metadata.md).
//
// A request is a decode when its number of scheduled (query) tokens is
// <= decode_threshold: 1 by default; backends that decode several query
// tokens per request (speculative / MTP) raise it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "lattn/common_metadata.h"

namespace lattn {

// Swaps ALL per-request state of batch positions i and j (the runner's
// InputBatch.swap_states).
using SwapStates = std::function<void(int i, int j)>;

// The runner's batch as the reordering sees it.
class InputBatch {
 public:
  virtual ~InputBatch() = default;
  virtual int num_reqs() const = 0;
  // Tokens scheduled for the request at position i this step.
  virtual int32_t num_scheduled_tokens(int i) const = 0;
  virtual void swap_states(int i, int j) = 0;
};

// Reorders the batch so that every request with <= decode_threshold scheduled
// tokens comes first, with the fewest swaps: the k prefills found inside the
// decode region [0, num_decodes) are swapped, front to back, with the k
// decodes found past it, back to front (decodes tend to stay in place across
// steps; new requests are appended at the back). Decode order is kept only
// partially and prefill order not at all. Returns true when it swapped.
//   num_scheduled_tokens [num_reqs] tokens per batch position (read before any swap)
bool reorder_batch_to_split_decodes_and_prefills(std::span<const int32_t> num_scheduled_tokens,
                                                 const SwapStates& swap_states, int decode_threshold = 1);
bool reorder_batch_to_split_decodes_and_prefills(InputBatch& input_batch, int decode_threshold = 1);

struct DecodePrefillSplit {
  int num_decodes = 0;
  int num_prefills = 0;
  int num_decode_tokens = 0;
  int num_prefill_tokens = 0;
  friend bool operator==(const DecodePrefillSplit&, const DecodePrefillSplit&) = default;
};

// The boundary of a reordered batch: (num_decodes, num_prefills,
// num_decode_tokens, num_prefill_tokens). Reads max_query_len, num_reqs,
// num_actual_tokens and query_start_loc_cpu (host int32 [num_reqs + 1];
// ValueError otherwise). Throws AssertionError when a decode follows a
// prefill (the batch was not reordered), naming both requests.
DecodePrefillSplit split_decodes_and_prefills(const CommonAttentionMetadata& common, int decode_threshold = 1);
// The same from the host query_start_loc [num_reqs + 1] (int32).
DecodePrefillSplit split_decodes_and_prefills(std::span<const int32_t> query_start_loc, int num_actual_tokens,
                                              int max_query_len, int decode_threshold = 1);

}  // namespace lattn
