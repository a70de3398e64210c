// src/core/metadata/slot_mapping.h — the unchecked slot-mapping loop shared by the
// public compute_slot_mapping and the metadata builder (internal).
#pragma once

#include <algorithm>
#include <cstdint>

#include "lattn/metadata.h"

namespace lattn::detail {

// Slots of positions [context_len, seq_len) into out[0 .. seq_len - context_len),
// PAD_SLOT_ID for positions below start_idx. The caller has checked that
// block_table covers seq_len. Walks block by block (no division per token).
inline void write_slots(int64_t* out, int64_t seq_len, int64_t context_len, int64_t start_idx, int block_size,
                        const int32_t* block_table) {
  const int64_t first_real = std::max(start_idx, context_len);
  int64_t n = 0;
  for (int64_t t = context_len; t < first_real && t < seq_len; ++t) out[n++] = PAD_SLOT_ID;
  int64_t t = first_real;
  while (t < seq_len) {
    const int64_t block = t / block_size;
    const int64_t offset = t % block_size;
    const int64_t end = std::min<int64_t>(seq_len, (block + 1) * block_size);
    const int64_t base = int64_t(block_table[block]) * block_size;
    for (int64_t o = offset; t < end; ++t, ++o) out[n++] = base + o;
  }
}

}  // namespace lattn::detail
