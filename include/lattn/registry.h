// lattn/registry.h — the named MLA backends and their overrides (docs/backends.md).
//
// The seeds' MLAPrefillBackendEnum + _MLA_PREFILL_OVERRIDES, in C++, once for
// prefill and once for decode. Each registry has named members:
//
//   reference  plain loops, fp64 accumulation: the oracle (any machine)
//   cpu        the fast CPU backend (the default without a GPU)
//   cuda       portable CUDA tensor-core kernels (sm80+)
//   hopper     Hopper kernels (sm90a)
//   CUSTOM     a placeholder for third-party backends: "must be registered before use"
//
// plus, in registration order before CUSTOM, any other built-in class linked
// into liblattn under a name of its own. Every member has a *path* (the seeds'
// class path) that says where its class comes from:
//
//   "builtin:NAME"                  a class compiled into liblattn (RegisterPrefillBackend)
//                                   whose name() is NAME; the default path of every member
//                                   except CUSTOM. A standard member that this build does
//                                   not contain (cuda without CUDA, hopper today) still
//                                   resolves: to a class whose is_available() is false
//                                   (reason "required dependencies not available") and
//                                   whose create() throws BackendUnavailableError.
//   "path/to/libfoo.so:symbol"      a plug-in (lattn/plugin.h): dlopen(path), call symbol.
//                                   The split is at the last ':'; a path without '/' is
//                                   searched like dlopen does (LD_LIBRARY_PATH, ...).
//   "object:NAME"                   a class object handed to register_mla_prefill_backend
//                                   in this process (the seeds' decorator form); NAME is its
//                                   name().
//
// CUSTOM has no default path (the seeds' None). Registering overrides a member's
// path ("last wins"); clear_override() returns to the default. Resolution is
// lazy, as in the seeds: a bad path is reported when the class is resolved
// (get_class), not when it is registered.
//
// Member names are matched case-insensitively ("Custom" is CUSTOM) and always
// reported in their canonical spelling. All functions are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lattn/backend.h"

namespace lattn {

enum class BackendKind { prefill, decode };

// "prefill" or "decode" (as it appears in messages: "MLA prefill backend").
const char* backend_kind_name(BackendKind kind);

// The member name of the third-party placeholder.
inline constexpr const char* kCustomBackendName = "CUSTOM";

// One registry: BackendClass is PrefillBackendClass or DecodeBackendClass.
// The two instances are mla_prefill_backend_registry() and
// mla_decode_backend_registry(); the class is not meant to be created elsewhere.
template <class BackendClass>
class BackendRegistry {
 public:
  using ClassPtr = std::shared_ptr<const BackendClass>;

  explicit BackendRegistry(BackendKind kind);
  ~BackendRegistry();
  BackendRegistry(const BackendRegistry&) = delete;
  BackendRegistry& operator=(const BackendRegistry&) = delete;

  BackendKind kind() const { return kind_; }

  // The members in order: reference, cpu, cuda, hopper, other built-ins, CUSTOM.
  std::vector<std::string> names() const;

  // The canonical member name of `name` (case-insensitive). Throws ValueError
  // "Unknown MLA prefill backend: 'x'. Valid options are: reference, cpu, cuda, hopper, CUSTOM".
  std::string canonical_name(const std::string& name) const;

  // The member's path: its override, else its default ("builtin:NAME"; none
  // for CUSTOM). Throws ValueError when there is none or it is empty (the
  // seeds' `not path` rule):
  //   "MLA prefill backend CUSTOM must be registered before use. Use
  //    register_mla_prefill_backend("CUSTOM", "path/to/libyour_backend.so:your_symbol")"
  // (the seed names its Python call; this names the C++/Python call of lattn).
  std::string get_path(const std::string& name) const;

  // Resolves get_path(name) to a class object (the seeds' get_class). The same
  // path always yields the same object. Throws ValueError as get_path, and
  // ImportError when the path cannot be resolved: a malformed path, an unknown
  // "builtin:"/"object:" name, or a plug-in that fails to load (its message
  // names the file and dlerror()), lacks the symbol, has another
  // LATTN_PLUGIN_API_VERSION, or provides no class of this kind.
  ClassPtr get_class(const std::string& name) const;

  // Resolves a path directly (what get_class does after get_path).
  ClassPtr resolve_path(const std::string& path) const;

  // True when the member has an override (even an empty one).
  bool is_overridden(const std::string& name) const;
  // Reverts the member to its default path; nothing happens without an override.
  void clear_override(const std::string& name);

  // Direct form: overrides the member's path (e.g. "build/libfoo.so:foo_plugin").
  // Not resolved now; an empty path makes get_path refuse.
  void register_backend(const std::string& name, const std::string& path);
  // Object form (the seeds' decorator): overrides the member with this class
  // object; its path becomes "object:" + cls->name(). Throws ValueError for nullptr.
  void register_backend(const std::string& name, ClassPtr cls);

  // Incremented by every register_backend / clear_override that changes
  // something; the selector drops memoized choices when it moves.
  uint64_t generation() const;

 private:
  struct State;
  BackendKind kind_;
  std::unique_ptr<State> state_;
};

using PrefillBackendRegistry = BackendRegistry<PrefillBackendClass>;
using DecodeBackendRegistry = BackendRegistry<DecodeBackendClass>;

extern template class BackendRegistry<PrefillBackendClass>;
extern template class BackendRegistry<DecodeBackendClass>;

// The process-wide registries.
PrefillBackendRegistry& mla_prefill_backend_registry();
DecodeBackendRegistry& mla_decode_backend_registry();

// The seeds' register_mla_prefill_backend(backend, class_path), and its
// decorator form with a class object; the decode twins. `backend` is a member
// name (CUSTOM to add a third-party backend, any other to override a built-in).
void register_mla_prefill_backend(const std::string& backend, const std::string& path);
void register_mla_prefill_backend(const std::string& backend, std::shared_ptr<const PrefillBackendClass> cls);
void register_mla_decode_backend(const std::string& backend, const std::string& path);
void register_mla_decode_backend(const std::string& backend, std::shared_ptr<const DecodeBackendClass> cls);

}  // namespace lattn
