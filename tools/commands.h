// tools/commands.h — the subcommands of `lattn`. Each adds itself to the root
// app and returns what to run when it was the one parsed.
#pragma once

#include <functional>
#include <memory>

#include <CLI/CLI.hpp>

namespace lattn::cli {

struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the exit code; throws CliError / lattn errors
};

Subcommand add_run_command(CLI::App& root);
Subcommand add_info_command(CLI::App& root);
Subcommand add_bench_command(CLI::App& root);

}  // namespace lattn::cli
