// lattn/plugin.h — the ABI of a backend built as a separate shared library.
//
// A plug-in is a shared library that exports one function per descriptor:
//
//   LATTN_PLUGIN_EXPORT const LattnPluginDescriptor* my_backend_plugin() {
//     static const MyPrefillClass prefill;            // a lattn::PrefillBackendClass
//     static const LattnPluginDescriptor d{LATTN_PLUGIN_API_VERSION, "my_backend", &prefill, nullptr};
//     return &d;
//   }
//
// and is registered by the string "path/to/libmy_backend.so:my_backend_plugin"
// (lattn/registry.h), the C++ analog of the seeds' "my.module.MyClass" class
// paths. lattn dlopen()s the file (RTLD_NOW | RTLD_LOCAL) the first time the
// backend is resolved, calls the function, checks api_version, and keeps the
// library loaded until the process exits (class objects must outlive every
// backend instance they created). examples/plugin/ is a complete plug-in.
//
// The classes cross the library boundary as C++ objects (virtual calls into
// the plug-in), so a plug-in must be compiled against the same lattn headers
// and a compatible C++ standard library as the liblattn it is loaded into;
// api_version is the guard against header drift.
#pragma once

#include <cstdint>

#include "lattn/backend.h"

// Bumped whenever anything a plug-in compiles against changes incompatibly:
// this struct after its first field, or the virtual interface of
// PrefillBackendClass / PrefillBackend / DecodeBackendClass / DecodeBackend
// (lattn/backend.h) or the types their methods take.
#define LATTN_PLUGIN_API_VERSION 1

// Marks a plug-in's entry point: C linkage (an unmangled name dlsym finds)
// and default visibility (exported even under -fvisibility=hidden).
#define LATTN_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" {

// What a plug-in entry point returns. The layout of the first field is frozen
// forever, so lattn can read the version of any plug-in before trusting the
// rest of the struct.
struct LattnPluginDescriptor {
  // Must be LATTN_PLUGIN_API_VERSION as the plug-in saw it when compiled.
  uint32_t api_version;
  // The backend's own name for messages (e.g. "example_naive"); not null.
  const char* name;
  // The prefill backend class the plug-in provides, or nullptr. Owned by the
  // plug-in; must stay valid while the library is loaded (a function-local
  // static is the usual choice).
  const lattn::PrefillBackendClass* prefill_class;
  // The decode backend class, or nullptr. Same ownership rule.
  const lattn::DecodeBackendClass* decode_class;
};

// The type of an entry point: no arguments, returns a descriptor that stays
// valid while the library is loaded (never nullptr for a working plug-in).
typedef const LattnPluginDescriptor* (*LattnPluginEntryPoint)(void);

}  // extern "C"
