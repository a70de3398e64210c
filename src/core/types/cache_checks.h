// src/core/types/cache_checks.h — the one comparison of a latent cache with
// the KvCacheSpec it was configured for (internal): the layer's forward and
// mla_decode's plan both refuse a cache through it.
#pragma once

#include "lattn/cache.h"
#include "lattn/kv_cache_spec.h"

namespace lattn::detail {

// ValueError naming `op` and argument 'cache' when the cache's latent dims
// (kv_lora_rank, qk_rope_head_dim) or its dtype differ from `expected`'s, or,
// when `check_block_size`, its block size. `whose` says where `expected`
// comes from ("the layer", "the plan"). The fp8 scale is the cache's own and
// is not compared. The cache must have passed LatentCache::validate.
void check_cache_matches(const char* op, const LatentCache& cache, const KvCacheSpec& expected, const char* whose,
                         bool check_block_size);

}  // namespace lattn::detail
