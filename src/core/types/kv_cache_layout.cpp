// KV-cache layout selection (see lattn/kv_cache_layout.h).
#include "lattn/kv_cache_layout.h"

#include <cstdlib>
#include <mutex>

#include "lattn/errors.h"
#include "lattn/log.h"

namespace lattn {
namespace {

std::mutex layout_mutex;
std::optional<std::string> layout_override;  // the seed's _KV_CACHE_LAYOUT_OVERRIDE
std::optional<std::string> memoized_layout;  // the lru_cache

const char* kEnvName = "LATTN_KV_CACHE_LAYOUT";

void check_layout(const std::string& where, const std::string& layout) {
  if (layout != "NHD" && layout != "HND") {
    throw ValueError(where + ": KV cache layout must be \"NHD\" or \"HND\", got \"" + layout + "\"");
  }
}

}  // namespace

std::string get_kv_connector_cache_layout() { return "NHD"; }

std::string get_kv_cache_layout() {
  std::lock_guard<std::mutex> lock(layout_mutex);
  if (memoized_layout) return *memoized_layout;
  std::string layout;
  if (const char* env = std::getenv(kEnvName)) {
    layout = env;
    check_layout(std::string("environment variable ") + kEnvName, layout);
    info_once(std::string("`") + kEnvName + "` environment variable detected. Setting KV cache layout to " + layout +
              ".");
  } else {
    layout = get_kv_connector_cache_layout();
  }
  if (layout_override) layout = *layout_override;
  memoized_layout = layout;
  return layout;
}

void set_kv_cache_layout(std::optional<std::string> cache_layout) {
  if (cache_layout) check_layout("set_kv_cache_layout", *cache_layout);
  std::lock_guard<std::mutex> lock(layout_mutex);
  layout_override = std::move(cache_layout);
}

void clear_kv_cache_layout_cache() {
  std::lock_guard<std::mutex> lock(layout_mutex);
  memoized_layout.reset();
}

}  // namespace lattn
