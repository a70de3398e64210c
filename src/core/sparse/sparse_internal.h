// src/core/sparse/sparse_internal.h — sparse-MLA helpers shared inside the library
// (internal): the fp8_ds_mla cache check LatentCache::validate calls.
#pragma once

#include "lattn/cache.h"

namespace lattn {

// The fp8_ds_mla part of LatentCache::validate: L a multiple of 128 and
// entries fp8_ds_mla_entry_bytes(L, R) wide. ValueError naming `op`.
void validate_fp8_ds_mla_cache(const LatentCache& cache, const char* op);

}  // namespace lattn
