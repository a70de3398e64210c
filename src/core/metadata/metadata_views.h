// src/core/metadata/metadata_views.h — the decode and prefill views of an
// MlaMetadata (internal): the one place they are cut from the whole-batch
// arrays, for the builder, advance_step and MlaCommonState's capture
// metadata alike.
//
// Decodes come first, so each view is a row range of the parent's arrays
// (docs/metadata.md): the decode view is rows [0, num_decodes) and tokens
// [0, num_decode_tokens); the prefill view the rows and tokens after them.
// The views are host views with the device views aliasing them; the caller
// binds the device views afterwards (to_device / bind_device_views).
#pragma once

#include "lattn/metadata.h"

namespace lattn::detail {

// The decode view of `m`, from its counts (num_decodes, num_decode_tokens,
// max_decode_query_len, max_decode_seq_len, block_size, use_cuda_graph) and
// host arrays. Its step plans are fresh (nothing planned yet).
DecodeMetadata make_decode_view(const MlaMetadata& m);

// The prefill view of `m` (num_prefills > 0): its query_start_loc is
// `rebased_query_start_loc` ([num_prefills + 1] int32, starting at 0: the
// parent's rows rebased, which a slice cannot express), `chunks` its
// context-chunk plan.
PrefillMetadata make_prefill_view(const MlaMetadata& m, const Tensor& rebased_query_start_loc, ContextChunkPlan chunks);

}  // namespace lattn::detail
