// `lattn run`: waits for the metadata builder, MlaAttention::forward and the
// registry/selector to land on main (the engine is in tools/serving).
#include "commands.h"
#include "exit_codes.h"

namespace lattn::cli {

Subcommand add_run_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand("run", "Serve a request trace through MLA attention layers");
  return {app, []() { return int(kExitOk); }};
}

}  // namespace lattn::cli
