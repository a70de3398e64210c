// bench/harness/report.h — a measured case judged against its ceilings, as
// a table for people and JSON for tools (public API only).
//
// roofline_us = max(FLOPs / compute peak, bytes / bandwidth) is the least time
// the case could take on this device; roofline_fraction = roofline_us /
// median_us (1.0 = at the roofline). `bound` names the larger term. With
// paired ceilings (RunOptions::pair_ceilings), roofline_fraction is instead
// the median over repeats of (roofline under that repeat's ceilings) / (its
// time); the other fields still use `ceilings`.
//
// Moved ceilings: on a shared machine the share of the cores and of memory
// bandwidth a case gets can change while it runs. check_ceiling_drift()
// compares short probes taken around a case (and the paired ones) with the
// run's ceilings; a case whose probes moved by more than the tolerance is
// flagged (`ceilings_moved`, "moved" in the table) instead of silently
// reporting a lower fraction.
#pragma once

#include <string>
#include <vector>

#include "harness/bench_case.h"
#include "harness/ceilings.h"
#include "harness/device_runner.h"

namespace lattn::bench {

struct Row {
  BenchCase bench_case;
  Work work;
  Measurement measurement;
  double gflops = 0;               // FLOPs / median time
  double gbps = 0;                 // bytes / median time
  double compute_peak_gflops = 0;  // the ceiling the FLOPs are judged by
  double roofline_us = 0;
  double roofline_fraction = 0;
  std::string bound;    // "compute" or "memory"
  bool paired = false;  // roofline_fraction from per-repeat ceilings
  // The largest relative change, over the probes taken around this case, of
  // the two ceilings its roofline uses (its compute peak, the bandwidth),
  // against the run's ceilings: -0.4 = a probe saw 40 % less. 0 = not checked.
  double ceiling_drift = 0;
  bool ceilings_checked = false;
  bool ceilings_moved = false;  // |ceiling_drift| > the tolerance
};

Row make_row(const BenchCase& c, const Measurement& m, const Ceilings& ceilings);

// Sets row.ceiling_drift / ceilings_checked / ceilings_moved from `probes`
// (short measurements taken before and after the case; the row's paired
// ceilings, if any, are added) against `run`, the ceilings the row is judged by.
void check_ceiling_drift(Row& row, const Ceilings& run, const std::vector<Ceilings>& probes, double tolerance = 0.15);

// A fixed-width table: one line per row, the ceilings above it.
std::string format_table(const Ceilings& ceilings, const std::vector<Row>& rows);

// {"ceilings": {"device", "device_name", "threads", "bandwidth_gbps", "f32_gflops",
//   "f16_gflops", "bf16_gflops"},
//  "rows": [{"name", "label", "phase", "backend", "device", "num_heads", "kv_lora_rank",
//   "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "dtype", "kv_cache_dtype",
//   "batch", "query_len", "context_len", "context_chunks", "seq_len", "block_size",
//   "num_threads", "flops", "bytes", "median_us", "min_us", "max_us", "samples_us", "gflops",
//   "gbps", "compute_peak_gflops", "roofline_us", "roofline_fraction", "bound",
//   "paired_ceilings": bool, "paired_fractions": [...] (with paired ceilings),
//   "ceilings_checked": bool, "ceiling_drift", "ceilings_moved": bool}]}
std::string to_json(const Ceilings& ceilings, const std::vector<Row>& rows, int indent = 2);

}  // namespace lattn::bench
