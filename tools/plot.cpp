// Runs scripts/plot_bench.py on the benchmark JSON.
#include "plot.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exit_codes.h"

extern char** environ;

namespace lattn::cli {
namespace {

namespace fs = std::filesystem;

// A temporary file removed when this goes out of scope.
class TempFile {
 public:
  TempFile() {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = std::string(dir && *dir ? dir : "/tmp") + "/lattn_bench_XXXXXX.json";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    const int fd = mkstemps(name.data(), 5);
    if (fd < 0) throw CliError(kExitPlotFailed, "--plot: cannot create a temporary file in " + pattern);
    close(fd);
    path_ = name.data();
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

std::string find_plot_script() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("LATTN_PLOT_SCRIPT"); env && *env) candidates.emplace_back(env);
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error) candidates.push_back(exe.parent_path().parent_path() / "share" / "lattn" / "plot_bench.py");
  candidates.emplace_back(LATTN_PLOT_SCRIPT_SOURCE);
  for (const fs::path& p : candidates) {
    if (fs::is_regular_file(p, error)) return p.string();
  }
  std::string tried;
  for (const fs::path& p : candidates) tried += (tried.empty() ? "" : ", ") + p.string();
  throw CliError(kExitPlotFailed,
                 "--plot: plot_bench.py was not found (tried " + tried + "); set LATTN_PLOT_SCRIPT to its path");
}

void plot_bench_json(const std::string& json, const std::string& png_path) {
  const std::string script = find_plot_script();
  TempFile input;
  {
    std::ofstream out(input.path());
    out << json;
    if (!out) throw CliError(kExitPlotFailed, "--plot: cannot write " + input.path());
  }
  const std::string python = LATTN_PLOT_PYTHON;
  std::vector<std::string> args = {python, script, input.path(), png_path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = 0;
  if (const int rc = posix_spawn(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ); rc != 0) {
    throw CliError(kExitPlotFailed, "--plot: cannot run " + python + " (" + std::strerror(rc) +
                                        "); install Debian's python3 and python3-matplotlib");
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) : "a signal";
    throw CliError(kExitPlotFailed, "--plot: " + script + " failed with " + how +
                                        " (its message is above); the benchmark results were printed");
  }
  if (!fs::is_regular_file(png_path)) {
    throw CliError(kExitPlotFailed, "--plot: " + script + " wrote no " + png_path);
  }
}

}  // namespace lattn::cli
