// tools/backend_report.h — which backends can serve a layer, in sentences:
// unknown names list the valid ones; an impossible configuration names every
// backend with its reasons.
#pragma once

#include <string>
#include <vector>

#include "lattn/registry.h"
#include "lattn/selector.h"
#include "layer_options.h"

namespace lattn::cli {

// The canonical backend names of the flags ("" = the selector's choice).
struct ResolvedBackends {
  std::string prefill;
  std::string decode;
};

// A sparse model's layer: the sparse selector must serve it (its name in
// both fields of the result). CliError(kExitNoBackend) with the selector's
// reasons otherwise.
ResolvedBackends require_sparse_backend(const LayerSetup& setup);

// The canonical name of a backend given by `flag` ("" stays ""); throws
// CliError(kExitUsage) for an unknown name, listing the valid ones.
std::string canonical_backend_name(BackendKind kind, const std::string& name, const char* flag);

// Canonical names of --prefill-backend / --decode-backend; throws
// CliError(kExitUsage) for an unknown name, listing the valid ones.
ResolvedBackends resolve_backend_names(const LayerSetup& setup);

// Checks --prefill-backend / --decode-backend and that the layer can be
// served at all. Throws CliError: kExitUsage for an unknown name (listing the
// valid ones), kExitNoBackend when the named backend, or every backend of the
// priority list, refuses the configuration (each with its reasons).
ResolvedBackends require_servable_backends(const LayerSetup& setup);

// Every member of one registry for `setup`, and the selector's verdict.
struct BackendListing {
  BackendKind kind = BackendKind::prefill;
  std::vector<std::string> priority;     // the automatic order for the device
  std::vector<BackendVerdict> verdicts;  // registry order
  std::string selected;                  // the backend the layer would run; "" when none
  std::string selection_error;           // why none, when none
};
BackendListing list_backends(BackendKind kind, const LayerSetup& setup);

// What backend `name` runs for `setup`, in words: a new instance's
// kernel_label() (a CUDA decode instance names its kernel family, since its
// tiles and split-KV parts are chosen per step), or backend_kernel_label()
// when no instance can be made here. "" for name "". Throws ValueError for a
// bad LATTN_CPU_ISA (the cpu label).
std::string selected_kernel_label(BackendKind kind, const std::string& name, const LayerSetup& setup);

// The selector's view of the layer (dims, dtypes, device, block size, names).
SelectorConfig selector_config(const LayerSetup& setup);

}  // namespace lattn::cli
