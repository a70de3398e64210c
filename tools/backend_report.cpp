// Backend names, verdicts and the selector's choice, for run and info.
#include "backend_report.h"

#include <algorithm>
#include <cstdlib>

#include "exit_codes.h"
#include "lattn/backend.h"
#include "lattn/errors.h"
#include "lattn/kernel_label.h"
#include "lattn/sparse.h"
#include "serving/text.h"

namespace lattn::cli {
namespace {

using serving::join;

template <class Registry>
std::string canonical(const Registry& registry, const std::string& name, const char* flag) {
  if (name.empty()) return "";
  try {
    return registry.canonical_name(name);
  } catch (const ValueError& e) {
    throw CliError(kExitUsage, std::string(flag) + ": " + e.what());
  }
}

std::vector<BackendVerdict> explain(BackendKind kind, const SelectorConfig& config) {
  const auto capability = selector_device_capability(config);
  return kind == BackendKind::prefill ? explain_mla_prefill_backends(capability, config)
                                      : explain_mla_decode_backends(capability, config);
}

std::string describe_layer(const LayerSetup& s) {
  return s.model + " --tp " + std::to_string(s.tp) + " (" + s.dims.str() + "), " + dtype_flag_name(s.dtype) +
         " activations, " + dtype_flag_name(s.kv_cache_dtype) + " cache, block size " + std::to_string(s.block_size) +
         ", on " + device_name(s.device);
}

// "  cuda: compute capability none (cpu) not supported, required dependencies not available"
std::string verdict_lines(const std::vector<BackendVerdict>& verdicts, const std::vector<std::string>& only) {
  std::string lines;
  for (const BackendVerdict& v : verdicts) {
    if (!only.empty() && std::find(only.begin(), only.end(), v.name) == only.end()) continue;
    lines += "\n  " + v.name + ": " + (v.valid() ? std::string("valid") : join(v.reasons, "; "));
    if (!v.error.empty()) lines += " (" + v.error + ")";
  }
  return lines;
}

// Throws kExitNoBackend when no backend of `kind` can serve the layer.
void require_one(BackendKind kind, const std::string& name, const LayerSetup& setup, const SelectorConfig& config) {
  const char* kind_name = backend_kind_name(kind);
  const std::vector<BackendVerdict> verdicts = explain(kind, config);
  if (!name.empty()) {
    for (const BackendVerdict& v : verdicts) {
      if (v.name != name || v.valid()) continue;
      std::vector<std::string> alternatives;
      for (const BackendVerdict& other : verdicts) {
        if (other.valid()) alternatives.push_back(other.name);
      }
      throw CliError(kExitNoBackend,
                     std::string("the ") + kind_name + " backend " + name + " cannot serve " + describe_layer(setup) +
                         ":" + verdict_lines(verdicts, {name}) + "\n" +
                         (alternatives.empty() ? std::string("No other backend can serve it either.")
                                               : "Backends that can: " + join(alternatives, ", ") + "."));
    }
    return;
  }
  const auto priority = mla_backend_priorities(setup.device, selector_device_capability(config));
  for (const BackendVerdict& v : verdicts) {
    if (v.valid() && std::find(priority.begin(), priority.end(), v.name) != priority.end()) return;
  }
  throw CliError(kExitNoBackend, std::string("no ") + kind_name + " backend can serve " + describe_layer(setup) +
                                     ". Each backend's reasons:" + verdict_lines(verdicts, {}));
}

}  // namespace

SelectorConfig selector_config(const LayerSetup& setup) {
  SelectorConfig config =
      SelectorConfig::for_dims(setup.dims, setup.dtype, setup.kv_cache_dtype, setup.device, setup.block_size);
  config.prefill_backend = setup.prefill_backend;
  config.decode_backend = setup.decode_backend;
  return config;
}

std::string canonical_backend_name(BackendKind kind, const std::string& name, const char* flag) {
  return kind == BackendKind::prefill ? canonical(mla_prefill_backend_registry(), name, flag)
                                      : canonical(mla_decode_backend_registry(), name, flag);
}

ResolvedBackends resolve_backend_names(const LayerSetup& setup) {
  // Without a flag, the selector's environment variable names the backend
  // (lattn/selector.h); it is checked here the same way, so that a bad value
  // is reported as a sentence before any work.
  auto flag_or_env = [](const std::string& flag_value, const char* flag, const char* env_var) {
    const char* env = std::getenv(env_var);
    if (!flag_value.empty() || !env || !*env) return std::make_pair(flag_value, flag);
    return std::make_pair(std::string(env), env_var);
  };
  const auto [prefill, prefill_source] = flag_or_env(setup.prefill_backend, "--prefill-backend", kPrefillBackendEnvVar);
  const auto [decode, decode_source] = flag_or_env(setup.decode_backend, "--decode-backend", kDecodeBackendEnvVar);
  ResolvedBackends names;
  names.prefill = canonical(mla_prefill_backend_registry(), prefill, prefill_source);
  names.decode = canonical(mla_decode_backend_registry(), decode, decode_source);
  return names;
}

ResolvedBackends require_servable_backends(const LayerSetup& setup) {
  const ResolvedBackends names = resolve_backend_names(setup);
  LayerSetup resolved = setup;
  resolved.prefill_backend = names.prefill;
  resolved.decode_backend = names.decode;
  const SelectorConfig config = selector_config(resolved);
  require_one(BackendKind::prefill, names.prefill, setup, config);
  require_one(BackendKind::decode, names.decode, setup, config);
  return names;
}

ResolvedBackends require_sparse_backend(const LayerSetup& setup) {
  SparseSelectorConfig config;
  config.dtype = setup.dtype;
  config.kv_cache_dtype = setup.kv_cache_dtype;
  config.num_heads = setup.dims.num_heads;
  config.kv_lora_rank = setup.dims.kv_lora_rank;
  config.qk_rope_head_dim = setup.dims.qk_rope_head_dim;
  config.topk = setup.indexer.index_topk;
  config.device = setup.device;
  config.backend = setup.sparse_backend;
  try {
    const std::string name = get_sparse_mla_backend(config)->name();
    return {name, name};
  } catch (const ValueError& e) {
    throw CliError(kExitNoBackend, e.what());
  }
}

BackendListing list_backends(BackendKind kind, const LayerSetup& setup) {
  const SelectorConfig config = selector_config(setup);
  const auto capability = selector_device_capability(config);
  BackendListing listing;
  listing.kind = kind;
  listing.priority = mla_backend_priorities(setup.device, capability);
  listing.verdicts = explain(kind, config);
  try {
    listing.selected = kind == BackendKind::prefill ? get_mla_prefill_backend(capability, config)->name()
                                                    : get_mla_decode_backend(capability, config)->name();
  } catch (const std::exception& e) {
    listing.selection_error = e.what();
  }
  return listing;
}

}  // namespace lattn::cli

namespace lattn::cli {

std::string selected_kernel_label(BackendKind kind, const std::string& name, const LayerSetup& setup) {
  if (name.empty()) return "";
  const MlaDims& d = setup.dims;
  RunContext context;
  context.device = setup.device;
  try {
    if (kind == BackendKind::prefill) {
      PrefillBackendParams p;
      p.num_heads = d.num_heads;
      p.scale = d.softmax_scale();
      p.kv_lora_rank = d.kv_lora_rank;
      p.qk_nope_head_dim = d.qk_nope_head_dim;
      p.qk_rope_head_dim = d.qk_rope_head_dim;
      p.v_head_dim = d.v_head_dim;
      p.dtype = setup.dtype;
      p.context = context;
      return mla_prefill_backend_registry().get_class(name)->create(p)->kernel_label();
    }
    DecodeBackendParams p;
    p.num_heads = d.num_heads;
    p.scale = d.softmax_scale();
    p.kv_lora_rank = d.kv_lora_rank;
    p.qk_rope_head_dim = d.qk_rope_head_dim;
    p.dtype = setup.dtype;
    p.kv_cache_dtype = setup.kv_cache_dtype;
    p.context = context;
    return mla_decode_backend_registry().get_class(name)->create(p)->kernel_label();
  } catch (const ValueError&) {
    // An instance cannot be made here (e.g. no such device): the label without one.
    return backend_kernel_label(name, setup.device, setup.dtype);
  } catch (const BackendUnavailableError&) {
    return backend_kernel_label(name, setup.device, setup.dtype);
  }
}

}  // namespace lattn::cli
