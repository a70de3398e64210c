// Plug-in entry points lattn must refuse, for tests/cpp/plugin_test.cpp:
// each returns something a working plug-in never does.
#include "lattn/plugin.h"

// A descriptor from a plug-in built against a future lattn: its api_version
// differs from this lattn's, so none of its other fields may be trusted.
LATTN_PLUGIN_EXPORT const LattnPluginDescriptor* lattn_wrong_api_version_plugin() {
  static const LattnPluginDescriptor descriptor{LATTN_PLUGIN_API_VERSION + 1, "from_the_future", nullptr, nullptr};
  return &descriptor;
}

// An entry point that returns no descriptor at all.
LATTN_PLUGIN_EXPORT const LattnPluginDescriptor* lattn_null_descriptor_plugin() { return nullptr; }
