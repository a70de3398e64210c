// src/core/backends/plugin_loader.h — opening a plug-in library and checking its
// descriptor (lattn/plugin.h) (internal; the registry's only dlopen user).
#pragma once

#include <string>

#include "lattn/plugin.h"

namespace lattn::detail {

// dlopen(file), dlsym(symbol), call it, check the descriptor's api_version
// against LATTN_PLUGIN_API_VERSION. `kind` ("prefill" / "decode") words the
// messages. Throws ImportError, each message naming the file and saying what
// to change: the library cannot be opened (dlerror(), and whether the file
// exists), the symbol is missing, it returned nullptr, or the API version
// differs. A library once opened stays loaded for the life of the process.
const LattnPluginDescriptor& load_plugin_descriptor(const std::string& file, const std::string& symbol,
                                                    const char* kind);

}  // namespace lattn::detail
