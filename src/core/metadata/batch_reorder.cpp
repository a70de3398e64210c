// Decodes-first reordering and the decode/prefill boundary (see
// lattn/batch_reorder.h; seed 004's algorithms).
#include "lattn/batch_reorder.h"

#include <string>
#include <vector>

#include "lattn/errors.h"

namespace lattn {
namespace {

void check_threshold(const char* op, int decode_threshold) {
  if (decode_threshold < 0) {
    throw ValueError(std::string(op) + ": decode_threshold must be >= 0, got " + std::to_string(decode_threshold));
  }
}

}  // namespace

bool reorder_batch_to_split_decodes_and_prefills(std::span<const int32_t> num_scheduled_tokens,
                                                 const SwapStates& swap_states, int decode_threshold) {
  check_threshold("reorder_batch_to_split_decodes_and_prefills", decode_threshold);
  std::vector<int> decodes, prefills;
  decodes.reserve(num_scheduled_tokens.size());
  prefills.reserve(num_scheduled_tokens.size());
  for (size_t i = 0; i < num_scheduled_tokens.size(); ++i) {
    (num_scheduled_tokens[i] <= decode_threshold ? decodes : prefills).push_back(int(i));
  }
  const int num_decodes = int(decodes.size()), num_prefills = int(prefills.size());
  bool modified = false;
  // The decodes past position num_decodes are exactly as many as the
  // prefills before it, and those are prefills[0..k): one pass suffices.
  for (int i = 1; i <= std::min(num_decodes, num_prefills); ++i) {
    const int decode_idx = decodes[size_t(num_decodes - i)];  // from the back
    if (decode_idx < num_decodes) break;                      // already in the decode region
    swap_states(prefills[size_t(i - 1)], decode_idx);         // prefills from the front
    modified = true;
  }
  return modified;
}

bool reorder_batch_to_split_decodes_and_prefills(InputBatch& input_batch, int decode_threshold) {
  std::vector<int32_t> tokens(size_t(std::max(input_batch.num_reqs(), 0)));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = input_batch.num_scheduled_tokens(int(i));
  return reorder_batch_to_split_decodes_and_prefills(
      tokens, [&](int i, int j) { input_batch.swap_states(i, j); }, decode_threshold);
}

DecodePrefillSplit split_decodes_and_prefills(std::span<const int32_t> qsl, int num_actual_tokens, int max_query_len,
                                              int decode_threshold) {
  const std::string op = "split_decodes_and_prefills: ";
  check_threshold("split_decodes_and_prefills", decode_threshold);
  if (qsl.empty()) throw ValueError(op + "query_start_loc must have num_reqs + 1 >= 1 entries, got 0");
  const int num_reqs = int(qsl.size()) - 1;
  if (max_query_len <= decode_threshold) return {num_reqs, 0, num_actual_tokens, 0};

  int first_prefill = -1;
  for (int r = 0; r < num_reqs; ++r) {
    if (qsl[size_t(r) + 1] - qsl[size_t(r)] > decode_threshold) {
      first_prefill = r;
      break;
    }
  }
  if (first_prefill < 0) return {num_reqs, 0, num_actual_tokens, 0};
  for (int r = first_prefill + 1; r < num_reqs; ++r) {
    const int query_len = qsl[size_t(r) + 1] - qsl[size_t(r)];
    if (query_len <= decode_threshold) {
      throw AssertionError(
          "torch.all(query_lens[first_prefill:] > decode_threshold) failed: the batch is not "
          "reordered (decodes first): request " +
          std::to_string(first_prefill) + " is a prefill (query_len " +
          std::to_string(qsl[size_t(first_prefill) + 1] - qsl[size_t(first_prefill)]) + ") but request " +
          std::to_string(r) + " after it has query_len " + std::to_string(query_len) + " <= decode_threshold " +
          std::to_string(decode_threshold));
    }
  }
  // query_lens[:first_prefill] <= decode_threshold holds by the choice of first_prefill.
  const int num_decode_tokens = qsl[size_t(first_prefill)];
  return {first_prefill, num_reqs - first_prefill, num_decode_tokens, num_actual_tokens - num_decode_tokens};
}

DecodePrefillSplit split_decodes_and_prefills(const CommonAttentionMetadata& common, int decode_threshold) {
  const Tensor& qsl = common.query_start_loc_cpu;
  if (!qsl.defined() || !qsl.device().is_cpu() || qsl.dtype() != DType::i32 || qsl.dim() != 1 ||
      qsl.size(0) != int64_t(common.num_reqs) + 1 || !qsl.is_contiguous()) {
    throw ValueError(
        "split_decodes_and_prefills: argument 'query_start_loc_cpu' must be a contiguous host int32 "
        "tensor of shape [" +
        std::to_string(int64_t(common.num_reqs) + 1) + "], got " +
        (qsl.defined() ? qsl.describe() : std::string("no tensor")));
  }
  return split_decodes_and_prefills({qsl.data_as<const int32_t>(), size_t(qsl.size(0))}, common.num_actual_tokens,
                                    common.max_query_len, decode_threshold);
}

}  // namespace lattn
