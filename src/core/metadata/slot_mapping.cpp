// Slot mapping of new tokens (see lattn/slot_mapping.h).
#include "lattn/slot_mapping.h"

#include <string>

#include "core/metadata/slot_mapping.h"
#include "lattn/errors.h"

namespace lattn {

int64_t compute_slot_mapping_start_idx(bool is_prompt, int64_t query_len, int64_t context_len,
                                       std::optional<int> sliding_window) {
  if (is_prompt && sliding_window) return std::max<int64_t>(0, query_len - *sliding_window);
  return 0;
}

void compute_slot_mapping(bool is_profile_run, std::span<int64_t> out, int64_t seq_len, int64_t context_len,
                          int64_t start_idx, int block_size, std::span<const int32_t> block_table) {
  const std::string op = "compute_slot_mapping: ";
  if (context_len < 0 || seq_len < context_len) {
    throw ValueError(op + "need 0 <= context_len <= seq_len, got context_len " + std::to_string(context_len) +
                     ", seq_len " + std::to_string(seq_len));
  }
  if (int64_t(out.size()) != seq_len - context_len) {
    throw ValueError(op + "argument 'out' must have seq_len - context_len = " + std::to_string(seq_len - context_len) +
                     " entries, got " + std::to_string(out.size()));
  }
  if (is_profile_run) {
    std::fill(out.begin(), out.end(), PAD_SLOT_ID);
    return;
  }
  if (block_size <= 0) throw ValueError(op + "block_size must be > 0, got " + std::to_string(block_size));
  const int64_t needed = (seq_len + block_size - 1) / block_size;
  if (int64_t(block_table.size()) < needed) {
    throw ValueError(op + "block_table has " + std::to_string(block_table.size()) + " entries, but seq_len " +
                     std::to_string(seq_len) + " with block_size " + std::to_string(block_size) + " needs " +
                     std::to_string(needed));
  }
  detail::write_slots(out.data(), seq_len, context_len, start_idx, block_size, block_table.data());
}

}  // namespace lattn
