// lattn/advance_step.h — multi-step decoding: advance a decode-only
// metadata by one token in place after sampling, without a new build
// (seed 002's MLACommonMetadata.advance_step + advance_step_flashattn,
// docs/metadata.md).
#pragma once

#include "lattn/metadata.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn {

// For each real request q < num_queries (position s = its seq_len before the
// step): input_tokens[q] = sampled_token_ids[q], input_positions[q] = s,
// seq_lens[q] = s + 1, slot_mapping[q] = block_table[q][s / block_size] *
// block_size + s % block_size, context_lens[q] = s. CUDA-graph padding rows
// [num_queries, num_seqs) get token 0, position 0 and slot PAD_SLOT_ID, and
// keep their seq_len. Then max_decode_seq_len = max(seq_lens), and
// query_start_loc / seq_start_loc are rewritten for one token per request.
//
// The block of position s must already be in the request's block-table row
// (the runner appends a block before a step crosses a block boundary); a row
// too short for it is refused, but a right-padding 0 cannot be told from
// block 0, as in the seed.
//
// turn_prefills_into_decodes (multi-step + chunked prefill, after the first
// step): a mixed batch [decodes | prefills] becomes all decodes first (one
// token per request; the prefill view is dropped).
//
//   sampled_token_ids [num_queries] or [num_queries, 1] int64
//   input_tokens      [>= num_seqs] int64 (written)
//   input_positions   [>= num_seqs] int64 (written)
// Each tensor may be on the host or on the metadata's device. The seed's
// assertions are checked first, in its order, as AssertionError with the
// seed's expression and the values; argument errors are ValueError. Nothing
// is written unless every check passes.
//
// lattn pads query_start_loc and context_lens to num_seqs rows under CUDA-graph
// padding (the seed leaves them at num_queries), so the seed's
// "query_start_loc.shape == (num_queries + 1,)" and
// "context_lens_tensor.shape == (num_queries,)" are checked as: the metadata
// has num_queries real requests (num_reqs - num_pad_reqs).
//
// Host metadata is updated directly. Metadata on a CUDA device is updated on
// the host and re-uploaded into the same device memory (to_device), so a
// captured graph sees the new values; this host path needs a host round trip
// for device sampled_token_ids (a device kernel is the CUDA backend's work).
void advance_step(MlaMetadata& metadata, const Tensor& sampled_token_ids, const Tensor& input_tokens,
                  const Tensor& input_positions, int block_size, int num_seqs, int num_queries,
                  bool turn_prefills_into_decodes = false, Stream stream = nullptr);

}  // namespace lattn
