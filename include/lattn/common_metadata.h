// lattn/common_metadata.h — vLLM v1's CommonAttentionMetadata (seed 004,
// docs/metadata.md): the per-batch description shared by every layer and backend,
// from which a metadata builder makes its backend's metadata.
//
// It holds non-owning Tensor views (the runner owns the arrays), host and
// device copies where the seed keeps both.
#pragma once

#include <cstdint>

#include "lattn/tensor.h"

namespace lattn {

struct CommonAttentionMetadata {
  Tensor query_start_loc;          // [num_reqs + 1] int32, device copy (may be undefined on a host-only batch)
  Tensor query_start_loc_cpu;      // [num_reqs + 1] int32, host: start row of each request's query tokens
  Tensor seq_lens;                 // [num_reqs] int32, device copy (may be undefined on a host-only batch)
  Tensor seq_lens_cpu;             // [num_reqs] int32, host: computed + newly scheduled tokens
  Tensor num_computed_tokens_cpu;  // [num_reqs] int32, host: tokens already cached (context_len)
  int num_reqs = 0;                // requests
  int num_actual_tokens = 0;       // real tokens of the batch (slot_mapping may be longer)
  int max_query_len = 0;           // longest query of the batch (tokens)
  Tensor block_table_tensor;       // [num_reqs, max_blocks] int32, host or device
  Tensor slot_mapping;             // [>= num_actual_tokens] int64, host or device

  CommonAttentionMetadata() = default;
  // The seed's constructor, argument order included. Like its __post_init__
  // it fills slot_mapping[num_actual_tokens:] with PAD_SLOT_ID (-1), which
  // full-CUDA-graph cache writes rely on. Throws ValueError (nothing written)
  // when slot_mapping is not a 1-D int64 tensor of at least num_actual_tokens
  // entries, or num_actual_tokens / num_reqs / max_query_len are negative.
  CommonAttentionMetadata(Tensor query_start_loc, Tensor query_start_loc_cpu, Tensor seq_lens, Tensor seq_lens_cpu,
                          Tensor num_computed_tokens_cpu, int num_reqs, int num_actual_tokens, int max_query_len,
                          Tensor block_table_tensor, Tensor slot_mapping);
};

}  // namespace lattn
