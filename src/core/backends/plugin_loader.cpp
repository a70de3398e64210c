// Loading backend plug-ins with dlopen (see plugin_loader.h).
#include "core/backends/plugin_loader.h"

#include <dlfcn.h>

#include <filesystem>
#include <system_error>

#include "lattn/errors.h"

namespace lattn::detail {
namespace {

std::string last_dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dynamic loader error";
}

// Whether `file` names a file the loader would open directly (it has a '/')
// and that file is missing; without a '/', dlopen searches the library path
// and only its own error can tell.
bool is_missing_path(const std::string& file) {
  if (file.find('/') == std::string::npos) return false;
  std::error_code ec;
  return !std::filesystem::exists(file, ec);
}

}  // namespace

const LattnPluginDescriptor& load_plugin_descriptor(const std::string& file, const std::string& symbol,
                                                    const char* kind) {
  const std::string what = std::string("MLA ") + kind + " backend plug-in '" + file + "'";
  dlerror();  // clear any stale error
  // RTLD_LOCAL: two plug-ins may define the same helper symbols without
  // clashing. RTLD_NOW: an unresolved symbol fails here, not mid-run.
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const std::string error = last_dl_error();
    throw ImportError("Cannot load " + what + ": " + error + ". " +
                      (is_missing_path(file)
                           ? "The file does not exist: build the plug-in or correct the path before the ':'."
                           : "Check that it is a shared library built for this machine and that the libraries "
                             "it needs (such as liblattn.so) can be found."));
  }
  dlerror();
  void* entry = dlsym(handle, symbol.c_str());
  if (!entry) {
    const std::string error = last_dl_error();
    throw ImportError(what + " has no symbol '" + symbol + "' (" + error + "). Correct the name after the ':', " +
                      "or export it from the plug-in as LATTN_PLUGIN_EXPORT const LattnPluginDescriptor* " + symbol +
                      "().");
  }
  const auto entry_point = reinterpret_cast<LattnPluginEntryPoint>(entry);
  const LattnPluginDescriptor* descriptor = entry_point();
  if (!descriptor) {
    throw ImportError(what + ": its entry point '" + symbol +
                      "' returned no descriptor (nullptr). Fix the plug-in to return a LattnPluginDescriptor.");
  }
  if (descriptor->api_version != LATTN_PLUGIN_API_VERSION) {
    throw ImportError(what + " (symbol '" + symbol + "') was built for lattn plug-in API version " +
                      std::to_string(descriptor->api_version) + ", but this lattn needs version " +
                      std::to_string(LATTN_PLUGIN_API_VERSION) + ". Rebuild the plug-in against this lattn's headers.");
  }
  return *descriptor;
}

}  // namespace lattn::detail
