// bench/harness/harness.h — the benchmark harness shared by every backend:
// the CLI's `lattn bench`, bench/cpu_bench and the CUDA benchmarks.
//
//   auto runner = lattn::bench::make_cpu_runner();          // a device
//   Ceilings ceil = runner->measure_ceilings({});          // same-run ceilings
//   for (const BenchCase& c : cpu_target_cases("cpu")) {
//     rows.push_back(make_row(c, time_case(*runner, c), ceil));
//   }
//   std::puts(format_table(ceil, rows).c_str());           // or to_json(ceil, rows)
//
// Vocabulary (docs/bench-method.md): median µs over repeats after warm-up, FLOPs and
// bytes by docs/bench-method.md, GFLOP/s, GB/s, and the fraction of the roofline built
// from ceilings measured in the same run.
#pragma once

#include "harness/bench_case.h"
#include "harness/ceilings.h"
#include "harness/device_runner.h"
#include "harness/report.h"
