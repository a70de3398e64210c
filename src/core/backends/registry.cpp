// The named MLA backends, their paths and overrides (see lattn/registry.h).
#include "lattn/registry.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <map>
#include <mutex>
#include <string_view>

#include "core/backends/builtin_backends.h"
#include "core/backends/plugin_loader.h"
#include "core/backends/unavailable_backend.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

// The members every build lists, in priority-neutral order (the selector has
// its own order). CUSTOM is appended after any other built-in names.
const std::vector<std::string>& standard_names() {
  static const std::vector<std::string> names{"reference", "cpu", "cuda", "hopper"};
  return names;
}

bool is_standard_name(const std::string& name) {
  const auto& s = standard_names();
  return std::find(s.begin(), s.end(), name) != s.end();
}

bool equals_ignoring_case(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) s += ", ";
    s += items[i];
  }
  return s;
}

constexpr std::string_view kBuiltinPrefix = "builtin:";
constexpr std::string_view kObjectPrefix = "object:";

// What differs between the prefill and the decode registry.
template <class BackendClass>
struct KindTraits;

template <>
struct KindTraits<PrefillBackendClass> {
  static constexpr const char* register_call = "register_mla_prefill_backend";
  static constexpr const char* other_register_call = "register_mla_decode_backend";
  static constexpr const char* descriptor_field = "prefill_class";
  static const auto& builtins() { return detail::builtin_prefill_classes(); }
  static auto unavailable(const std::string& name) { return detail::make_unavailable_prefill_class(name); }
  static const PrefillBackendClass* from(const LattnPluginDescriptor& d) { return d.prefill_class; }
  static bool other_kind_present(const LattnPluginDescriptor& d) { return d.decode_class != nullptr; }
};

template <>
struct KindTraits<DecodeBackendClass> {
  static constexpr const char* register_call = "register_mla_decode_backend";
  static constexpr const char* other_register_call = "register_mla_prefill_backend";
  static constexpr const char* descriptor_field = "decode_class";
  static const auto& builtins() { return detail::builtin_decode_classes(); }
  static auto unavailable(const std::string& name) { return detail::make_unavailable_decode_class(name); }
  static const DecodeBackendClass* from(const LattnPluginDescriptor& d) { return d.decode_class; }
  static bool other_kind_present(const LattnPluginDescriptor& d) { return d.prefill_class != nullptr; }
};

}  // namespace

const char* backend_kind_name(BackendKind kind) { return kind == BackendKind::prefill ? "prefill" : "decode"; }

template <class BackendClass>
struct BackendRegistry<BackendClass>::State {
  mutable std::mutex mutex;
  std::map<std::string, std::string> overrides;      // member -> path (the seeds' _MLA_PREFILL_OVERRIDES)
  std::map<std::string, ClassPtr> objects;           // "object:NAME" targets, by NAME
  mutable std::map<std::string, ClassPtr> resolved;  // path -> class: plug-ins and placeholders
  std::atomic<uint64_t> generation{0};
};

template <class BackendClass>
BackendRegistry<BackendClass>::BackendRegistry(BackendKind kind) : kind_(kind), state_(std::make_unique<State>()) {}

template <class BackendClass>
BackendRegistry<BackendClass>::~BackendRegistry() = default;

template <class BackendClass>
std::vector<std::string> BackendRegistry<BackendClass>::names() const {
  std::vector<std::string> names = standard_names();
  for (const auto& cls : KindTraits<BackendClass>::builtins()) {
    const std::string n = cls->name();
    const bool listed =
        std::any_of(names.begin(), names.end(), [&](const std::string& m) { return equals_ignoring_case(m, n); });
    if (!listed && !equals_ignoring_case(n, kCustomBackendName)) names.push_back(n);
  }
  names.emplace_back(kCustomBackendName);
  return names;
}

template <class BackendClass>
std::string BackendRegistry<BackendClass>::canonical_name(const std::string& name) const {
  const auto members = names();
  for (const auto& m : members) {
    if (equals_ignoring_case(m, name)) return m;
  }
  throw ValueError(std::string("Unknown MLA ") + backend_kind_name(kind_) + " backend: '" + name +
                   "'. Valid options are: " + join(members));
}

template <class BackendClass>
std::string BackendRegistry<BackendClass>::get_path(const std::string& name) const {
  const std::string member = canonical_name(name);
  std::string path;
  {
    std::lock_guard lock(state_->mutex);
    if (const auto it = state_->overrides.find(member); it != state_->overrides.end()) {
      path = it->second;
    } else if (member != kCustomBackendName) {
      path = std::string(kBuiltinPrefix) + member;
    }
  }
  if (path.empty()) {
    throw ValueError(std::string("MLA ") + backend_kind_name(kind_) + " backend " + member +
                     " must be registered before use. Use " + KindTraits<BackendClass>::register_call + "(\"" + member +
                     "\", \"path/to/libyour_backend.so:your_symbol\")");
  }
  return path;
}

template <class BackendClass>
typename BackendRegistry<BackendClass>::ClassPtr BackendRegistry<BackendClass>::get_class(
    const std::string& name) const {
  return resolve_path(get_path(name));
}

template <class BackendClass>
typename BackendRegistry<BackendClass>::ClassPtr BackendRegistry<BackendClass>::resolve_path(
    const std::string& path) const {
  using Traits = KindTraits<BackendClass>;
  const std::string kind = backend_kind_name(kind_);
  const std::string subject = "MLA " + kind + " backend path '" + path + "'";

  if (path.starts_with(kBuiltinPrefix)) {
    const std::string name = path.substr(kBuiltinPrefix.size());
    const auto& builtins = Traits::builtins();
    // The last registration of a name wins, as for overrides.
    for (auto it = builtins.rbegin(); it != builtins.rend(); ++it) {
      if ((*it)->name() == name) return *it;
    }
    if (is_standard_name(name)) {
      std::lock_guard lock(state_->mutex);
      auto& placeholder = state_->resolved[path];
      if (!placeholder) placeholder = Traits::unavailable(name);
      return placeholder;
    }
    std::vector<std::string> present;
    for (const auto& cls : builtins) present.push_back(cls->name());
    throw ImportError("Cannot resolve " + subject + ": this build of lattn has no built-in " + kind +
                      " backend class named '" + name + "' (built in: " + (present.empty() ? "none" : join(present)) +
                      "). Use one of those names after 'builtin:', or a plug-in path 'path/to/libfoo.so:symbol'.");
  }

  if (path.starts_with(kObjectPrefix)) {
    const std::string name = path.substr(kObjectPrefix.size());
    std::lock_guard lock(state_->mutex);
    if (const auto it = state_->objects.find(name); it != state_->objects.end()) return it->second;
    throw ImportError("Cannot resolve " + subject + ": no " + kind + " backend class object named '" + name +
                      "' was registered in this process. Pass the class object itself to " + Traits::register_call +
                      "(backend, class_object).");
  }

  const size_t colon = path.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == path.size()) {
    throw ImportError("Cannot resolve " + subject +
                      ": expected 'path/to/libfoo.so:symbol' (a plug-in), 'builtin:NAME' or 'object:NAME'. "
                      "Correct the path given to " +
                      Traits::register_call + ".");
  }
  {
    std::lock_guard lock(state_->mutex);
    if (const auto it = state_->resolved.find(path); it != state_->resolved.end()) return it->second;
  }
  // Loaded without the lock: a plug-in's static initializers may call back
  // into the registry.
  const std::string file = path.substr(0, colon);
  const std::string symbol = path.substr(colon + 1);
  const LattnPluginDescriptor& descriptor = detail::load_plugin_descriptor(file, symbol, kind.c_str());
  const BackendClass* cls = Traits::from(descriptor);
  if (!cls) {
    const std::string plugin_name = descriptor.name ? descriptor.name : "(unnamed)";
    throw ImportError(
        "MLA " + kind + " backend plug-in '" + path + "' (" + plugin_name + ") provides no " + kind +
        " backend class (its descriptor's " + Traits::descriptor_field + " is null). " +
        (Traits::other_kind_present(descriptor)
             ? std::string("It provides the other kind: register it with ") + Traits::other_register_call + " instead."
             : std::string("Fix the plug-in's descriptor.")));
  }
  // The plug-in owns the object and stays loaded: a non-owning pointer.
  ClassPtr shared(cls, [](const BackendClass*) {});
  std::lock_guard lock(state_->mutex);
  return state_->resolved.emplace(path, std::move(shared)).first->second;
}

template <class BackendClass>
bool BackendRegistry<BackendClass>::is_overridden(const std::string& name) const {
  const std::string member = canonical_name(name);
  std::lock_guard lock(state_->mutex);
  return state_->overrides.contains(member);
}

template <class BackendClass>
void BackendRegistry<BackendClass>::clear_override(const std::string& name) {
  const std::string member = canonical_name(name);
  std::lock_guard lock(state_->mutex);
  if (state_->overrides.erase(member)) ++state_->generation;
}

template <class BackendClass>
void BackendRegistry<BackendClass>::register_backend(const std::string& name, const std::string& path) {
  const std::string member = canonical_name(name);
  std::lock_guard lock(state_->mutex);
  state_->overrides[member] = path;
  ++state_->generation;
}

template <class BackendClass>
void BackendRegistry<BackendClass>::register_backend(const std::string& name, ClassPtr cls) {
  const char* call = KindTraits<BackendClass>::register_call;
  if (!cls) {
    throw ValueError(std::string(call) + ": argument 'cls' must be a backend class object, got nullptr");
  }
  const std::string object_name = cls->name();
  if (object_name.empty()) {
    throw ValueError(std::string(call) + ": argument 'cls' must have a non-empty name(), got \"\"");
  }
  const std::string member = canonical_name(name);
  std::lock_guard lock(state_->mutex);
  state_->objects[object_name] = std::move(cls);
  state_->overrides[member] = std::string(kObjectPrefix) + object_name;
  ++state_->generation;
}

template <class BackendClass>
uint64_t BackendRegistry<BackendClass>::generation() const {
  return state_->generation.load();
}

template class BackendRegistry<PrefillBackendClass>;
template class BackendRegistry<DecodeBackendClass>;

PrefillBackendRegistry& mla_prefill_backend_registry() {
  static PrefillBackendRegistry registry(BackendKind::prefill);
  return registry;
}

DecodeBackendRegistry& mla_decode_backend_registry() {
  static DecodeBackendRegistry registry(BackendKind::decode);
  return registry;
}

void register_mla_prefill_backend(const std::string& backend, const std::string& path) {
  mla_prefill_backend_registry().register_backend(backend, path);
}

void register_mla_prefill_backend(const std::string& backend, std::shared_ptr<const PrefillBackendClass> cls) {
  mla_prefill_backend_registry().register_backend(backend, std::move(cls));
}

void register_mla_decode_backend(const std::string& backend, const std::string& path) {
  mla_decode_backend_registry().register_backend(backend, path);
}

void register_mla_decode_backend(const std::string& backend, std::shared_ptr<const DecodeBackendClass> cls) {
  mla_decode_backend_registry().register_backend(backend, std::move(cls));
}

}  // namespace lattn
