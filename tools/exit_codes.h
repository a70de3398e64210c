// tools/exit_codes.h — what `lattn` returns, and the error that carries it.
// docs/cli.md documents the codes; `lattn --help` prints them.
#pragma once

#include <stdexcept>
#include <string>

namespace lattn::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitRuntimeError = 1,  // lattn failed while running (an error from the library, a CUDA error)
  kExitUsage = 2,         // a bad flag or value: unknown option, unknown backend/model/dtype, out of range
  kExitNoBackend = 3,  // the configuration is impossible: no backend can serve it, or a request can never fit the cache
  kExitBadInput = 4,   // an input file cannot be read or does not parse (--trace names the bad line)
  kExitVerifyFailed = 5,  // --verify: an output differs from the reference beyond the dtype's bound
  kExitPlotFailed = 6,    // bench --plot: the plotting script failed (the JSON was still written)
};

// "exit codes: 0 ok, 1 runtime error, ..." (for --help footers).
const char* exit_codes_help();

// An error the command reports as a sentence and exits with `code`.
class CliError : public std::runtime_error {
 public:
  CliError(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

}  // namespace lattn::cli
