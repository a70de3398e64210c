// bench/cpu_bench.cpp — the `cpu` backend's target benchmarks (issue 6,
// docs/bench-method.md) through the shared harness: bf16, DeepSeek dims, 16 heads;
// prefill causal 1 x 1024, prefill 1024 new + 8192 context in 4 chunks,
// decode 8 x 4096 with block sizes 16 and 64; ceilings measured in the same
// run (before every case and after the last, the best kept); optionally the
// `reference` backend on the same cases for the speedup.
//
//   cpu_bench [--threads N] [--repeats N] [--warmup N] [--isa scalar|avx2|avx512|avx512bf16]
//             [--reference] [--paired] [--json PATH]
//   --paired: judge every repeat against ceilings re-measured right before it
//             (shared machines; see RunOptions::pair_ceilings)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "lattn/cpu.h"
#include "lattn/errors.h"

namespace {

struct Options {
  int threads = 0;
  int repeats = 10;
  int warmup = 2;
  bool reference = false;
  bool paired = false;
  std::string isa;
  std::string json_path;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw lattn::ValueError("cpu_bench: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") {
      o.threads = std::stoi(value());
    } else if (a == "--repeats") {
      o.repeats = std::stoi(value());
    } else if (a == "--warmup") {
      o.warmup = std::stoi(value());
    } else if (a == "--isa") {
      o.isa = value();
    } else if (a == "--reference") {
      o.reference = true;
    } else if (a == "--paired") {
      o.paired = true;
    } else if (a == "--json") {
      o.json_path = value();
    } else {
      throw lattn::ValueError("cpu_bench: unknown argument '" + a +
                              "' (use --threads, --repeats, --warmup, --isa, --reference, --paired, --json)");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace lattn::bench;
  try {
    const Options o = parse(argc, argv);
    if (!o.isa.empty()) lattn::set_cpu_isa(lattn::parse_cpu_isa(o.isa));
    auto runner = make_cpu_runner(o.threads);
    // Ceilings before every case and after the last, the best of each kept:
    // on a shared machine a probe that lost its core to another process
    // under-reports, and a ceiling that is too low flatters every ratio.
    Ceilings ceilings = runner->measure_ceilings({});
    std::vector<BenchCase> cases;
    std::vector<Measurement> measurements;
    for (const BenchCase& c : cpu_target_cases("cpu", o.threads)) {
      if (!cases.empty()) ceilings = best_of(ceilings, runner->measure_ceilings({}));
      cases.push_back(c);
      RunOptions run;
      run.warmup = o.warmup;
      run.repeats = o.repeats;
      run.pair_ceilings = o.paired;
      measurements.push_back(time_case(*runner, c, run));
      if (o.reference) {
        BenchCase ref = c;
        ref.backend = "reference";
        // The reference is slow (f64 loops): one run, no warm-up.
        cases.push_back(ref);
        measurements.push_back(time_case(*runner, ref, {0, 1}));
      }
    }
    ceilings = best_of(ceilings, runner->measure_ceilings({}));
    std::vector<Row> rows;
    std::vector<std::string> speedups;
    for (size_t i = 0; i < cases.size(); ++i) {
      rows.push_back(make_row(cases[i], measurements[i], ceilings));
      if (cases[i].backend == "reference") {
        char line[256];
        std::snprintf(line, sizeof line, "%-52s speedup over reference: %.1fx\n", cases[i - 1].name().c_str(),
                      measurements[i].median_us / measurements[i - 1].median_us);
        speedups.push_back(line);
      }
    }
    std::printf("cpu path: %s\n%s", lattn::cpu_isa_name(lattn::cpu_isa()), format_table(ceilings, rows).c_str());
    for (const std::string& s : speedups) std::fputs(s.c_str(), stdout);
    if (!o.json_path.empty()) {
      std::ofstream(o.json_path) << to_json(ceilings, rows) << "\n";
      std::printf("JSON written to %s\n", o.json_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
