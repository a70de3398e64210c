// src/core/types/batch_invariant.h — the environment switch of the batch-invariant
// mode (internal; docs/mla.md, "Batch invariance").
#pragma once

namespace lattn::detail {

// True when LATTN_BATCH_INVARIANT is set to 1 (or "true"/"on"): MlaAttention
// and MlaMetadataBuilder then run batch-invariant whatever their config says.
bool batch_invariant_from_env();

}  // namespace lattn::detail
