// lattn/slot_mapping.h — where each new token is written in the paged cache
// (docs/metadata.md; vLLM's compute_slot_mapping_start_idx / compute_slot_mapping).
//
// The slot of token position t of a request is
//   block_table[t / block_size] * block_size + t % block_size,
// and PAD_SLOT_ID (-1) marks a token the cache writers must skip.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace lattn {

// First query index (counted from the start of the prompt) that still needs
// a slot: max(0, query_len - sliding_window) for a prompt (prefill) under a
// sliding window, else 0. Tokens before it fall out of the window.
int64_t compute_slot_mapping_start_idx(bool is_prompt, int64_t query_len, int64_t context_len,
                                       std::optional<int> sliding_window);

// Writes the slots of the new tokens [context_len, seq_len) of one request:
// max(0, start_idx - context_len) PAD_SLOT_IDs, then the slots of positions
// [max(start_idx, context_len), seq_len). A profile run writes PAD_SLOT_ID
// everywhere (its block tables are empty).
//   out          [seq_len - context_len] int64 (written)
//   block_table  [>= cdiv(seq_len, block_size)] int32 physical block ids (unused in a profile run)
// Throws ValueError (nothing written) on a wrong out size, a negative length,
// block_size <= 0, or a block table too short for seq_len.
void compute_slot_mapping(bool is_profile_run, std::span<int64_t> out, int64_t seq_len, int64_t context_len,
                          int64_t start_idx, int block_size, std::span<const int32_t> block_table);

}  // namespace lattn
