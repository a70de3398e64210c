// `lattn bench`: (in progress)
#include "commands.h"
#include "exit_codes.h"

namespace lattn::cli {

Subcommand add_bench_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand("bench", "Benchmark prefill and decode against measured ceilings");
  return {app, []() { return int(kExitOk); }};
}

}  // namespace lattn::cli
