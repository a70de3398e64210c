// lattn/kv_cache_layout.h — the KV-cache layout name shared with other
// attention backends and KV connectors (seed 004, docs/metadata.md).
//
// Precedence: set_kv_cache_layout() override > environment variable
// LATTN_KV_CACHE_LAYOUT > the connector's layout (default "NHD").
// Like the seed's functools.lru_cache, the first get_kv_cache_layout()
// memoizes its answer: a later set_kv_cache_layout() changes nothing until
// clear_kv_cache_layout_cache(). MLA's 3-D latent cache ignores the value.
// Thread-safe.
#pragma once

#include <optional>
#include <string>

namespace lattn {

// "NHD" (default) or "HND". Logs once at info level when the environment
// variable decides: "`LATTN_KV_CACHE_LAYOUT` environment variable detected.
// Setting KV cache layout to HND." Throws ValueError for any other value.
std::string get_kv_cache_layout();

// Sets (nullopt: removes) the global override. Throws ValueError unless
// "NHD" or "HND".
void set_kv_cache_layout(std::optional<std::string> cache_layout);

// Forgets the memoized layout (the seed's get_kv_cache_layout.cache_clear()).
void clear_kv_cache_layout_cache();

// The connector's layout when neither override nor environment is set.
std::string get_kv_connector_cache_layout();

}  // namespace lattn
