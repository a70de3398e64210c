// tools/plot.h — `lattn bench --plot`: the C++ side only writes JSON; the
// figure is drawn by scripts/plot_bench.py with Debian's Python and
// python3-matplotlib.
#pragma once

#include <string>

namespace lattn::cli {

// Where the script is: $LATTN_PLOT_SCRIPT, else next to an installed binary
// (<prefix>/share/lattn/plot_bench.py), else the source tree this binary was
// built from. Throws CliError(kExitPlotFailed) when none exists.
std::string find_plot_script();

// Writes `json` (the harness's JSON) to a temporary file and runs
// `<python> plot_bench.py FILE png_path`. Throws CliError(kExitPlotFailed)
// with the script's exit status when it fails or writes no file.
void plot_bench_json(const std::string& json, const std::string& png_path);

}  // namespace lattn::cli
