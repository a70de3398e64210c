// The `lattn` command: `run` (a serving-shaped workload), `info` (the build,
// the machine, the backends) and `bench` (the benchmark harness).
//
// Every failure ends as one sentence on stderr ("lattn run: error: ...") and
// an exit code from exit_codes.h; nothing is printed as a raw exception.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "exit_codes.h"
#include "lattn/cpu.h"
#include "lattn/errors.h"
#include "lattn/version.h"

namespace lattn::cli {

const char* exit_codes_help() {
  return "Exit codes: 0 success; 1 runtime error; 2 bad flag or value (unknown option, backend, model, dtype); "
         "3 impossible configuration (no backend can serve it, or a request can never fit the cache); "
         "4 unreadable or malformed input file; 5 --verify found an error beyond the dtype's bound; "
         "6 bench --plot failed (the results were still printed).";
}

namespace {

int report(const std::string& command, ExitCode code, const std::string& message) {
  std::fprintf(stderr, "%s: error: %s\n", command.c_str(), message.c_str());
  return code;
}

int main_impl(int argc, char** argv) {
  CLI::App app{
      "lattn: Multi-head Latent Attention (MLA) for inference engines.\n"
      "  lattn run     serve a request trace through MLA layers and report throughput\n"
      "  lattn info    the build, this machine, and which backends can serve a model\n"
      "  lattn bench   measure prefill and decode against this machine's ceilings",
      "lattn"};
  app.set_version_flag("--version", std::string("lattn ") + version());
  app.require_subcommand(1);
  app.footer(exit_codes_help());

  std::vector<Subcommand> commands = {add_run_command(app), add_info_command(app), add_bench_command(app)};
  std::string command_name = "lattn";
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    for (const Subcommand& c : commands) {
      if (c.app->parsed()) command_name = "lattn " + c.app->get_name();
    }
    std::string message = e.what();
    if (message.empty()) message = "bad command line";
    return report(command_name, kExitUsage, message + " (see '" + command_name + " --help')");
  }

  for (const Subcommand& c : commands) {
    if (!c.app->parsed()) continue;
    command_name = "lattn " + c.app->get_name();
    // The environment is checked before any command: a bad LATTN_CPU_ISA is
    // a usage error everywhere, not only where the CPU kernels first run.
    try {
      (void)cpu_isa();
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const char* env = std::getenv("LATTN_CPU_ISA");
      return report(command_name, kExitUsage,
                    what.find("LATTN_CPU_ISA") != std::string::npos
                        ? what
                        : "LATTN_CPU_ISA=" + std::string(env ? env : "") + " is not usable: " + what);
    }
    try {
      return c.run();
    } catch (const CliError& e) {
      return report(command_name, e.code(), e.what());
    } catch (const OutOfMemoryError& e) {
      return report(command_name, kExitNoBackend,
                    std::string(e.what()) +
                        "; the configuration does not fit in memory: lower --num-blocks, "
                        "--layers or --max-num-batched-tokens");
    } catch (const std::bad_alloc&) {
      return report(command_name, kExitNoBackend,
                    "out of memory; the configuration does not fit: lower --num-blocks, --layers or "
                    "--max-num-batched-tokens");
    } catch (const std::length_error&) {
      return report(command_name, kExitNoBackend,
                    "a buffer the configuration needs is larger than this machine can address: lower --num-blocks, "
                    "--layers or --max-num-batched-tokens");
    } catch (const std::exception& e) {
      return report(command_name, kExitRuntimeError, e.what());
    }
  }
  return kExitOk;
}

}  // namespace
}  // namespace lattn::cli

int main(int argc, char** argv) { return lattn::cli::main_impl(argc, argv); }
