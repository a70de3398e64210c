// Rows, the table and the JSON of a benchmark run (see report.h).
#include "harness/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

namespace lattn::bench {

namespace {

struct Roofline {
  double us = 0;
  bool compute_bound = true;
};

Roofline roofline_of(const BenchCase& c, const Work& w, const Ceilings& ceilings) {
  const double peak = ceilings.compute_gflops(c.dtype);
  const double compute_us = peak > 0 ? w.flops / (peak * 1e3) : 0;
  const double memory_us = ceilings.bandwidth_gbps > 0 ? w.bytes / (ceilings.bandwidth_gbps * 1e3) : 0;
  return {std::max(compute_us, memory_us), compute_us >= memory_us};
}

// Per repeat: its roofline (its own ceilings) over its time.
std::vector<double> paired_fractions(const BenchCase& c, const Work& w, const Measurement& m) {
  std::vector<double> f;
  for (size_t i = 0; i < m.paired_ceilings.size() && i < m.samples_us.size(); ++i) {
    f.push_back(m.samples_us[i] > 0 ? roofline_of(c, w, m.paired_ceilings[i]).us / m.samples_us[i] : 0);
  }
  return f;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Row make_row(const BenchCase& c, const Measurement& m, const Ceilings& ceilings) {
  Row r;
  r.bench_case = c;
  r.work = work_of(c);
  r.measurement = m;
  const double seconds = m.median_us * 1e-6;
  r.gflops = seconds > 0 ? r.work.flops / seconds / 1e9 : 0;
  r.gbps = seconds > 0 ? r.work.bytes / seconds / 1e9 : 0;
  r.compute_peak_gflops = ceilings.compute_gflops(c.dtype);
  const Roofline roof = roofline_of(c, r.work, ceilings);
  r.roofline_us = roof.us;
  r.bound = roof.compute_bound ? "compute" : "memory";
  r.paired = !m.paired_ceilings.empty();
  r.roofline_fraction =
      r.paired ? median(paired_fractions(c, r.work, m)) : (m.median_us > 0 ? r.roofline_us / m.median_us : 0);
  return r;
}

void check_ceiling_drift(Row& row, const Ceilings& run, const std::vector<Ceilings>& probes, double tolerance) {
  std::vector<Ceilings> all = probes;
  all.insert(all.end(), row.measurement.paired_ceilings.begin(), row.measurement.paired_ceilings.end());
  const DType dtype = row.bench_case.dtype;
  double drift = 0;
  const auto consider = [&drift](double probe, double reference) {
    if (reference <= 0 || probe <= 0) return;
    const double d = probe / reference - 1;
    if (std::abs(d) > std::abs(drift)) drift = d;
  };
  for (const Ceilings& p : all) {
    consider(p.compute_gflops(dtype), run.compute_gflops(dtype));
    consider(p.bandwidth_gbps, run.bandwidth_gbps);
  }
  row.ceilings_checked = !all.empty();
  row.ceiling_drift = drift;
  row.ceilings_moved = std::abs(drift) > tolerance;
}

std::string format_table(const Ceilings& ceilings, const std::vector<Row>& rows) {
  char line[512];
  std::string s;
  std::snprintf(line, sizeof line,
                "device %s: %s\nceilings: f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s, f16 %.1f GFLOP/s, bandwidth %.1f GB/s\n",
                ceilings.device.c_str(), ceilings.device_name.c_str(), ceilings.f32_gflops, ceilings.bf16_gflops,
                ceilings.f16_gflops, ceilings.bandwidth_gbps);
  s += line;
  std::snprintf(line, sizeof line, "%-52s %12s %10s %10s %9s %9s %8s %8s %s\n", "case", "median_us", "min_us", "max_us",
                "GFLOP/s", "GB/s", "roofline", "bound", "ceilings");
  s += line;
  int moved = 0;
  for (const Row& r : rows) {
    char drift[32] = "-";
    if (r.ceilings_checked) {
      std::snprintf(drift, sizeof drift, "%s %+.0f%%", r.ceilings_moved ? "MOVED" : "ok", 100 * r.ceiling_drift);
    }
    moved += r.ceilings_moved;
    std::snprintf(line, sizeof line, "%-52s %12.1f %10.1f %10.1f %9.1f %9.2f %8.3f %8s %s\n",
                  r.bench_case.name().c_str(), r.measurement.median_us, r.measurement.min_us, r.measurement.max_us,
                  r.gflops, r.gbps, r.roofline_fraction, r.bound.c_str(), drift);
    s += line;
  }
  if (moved) {
    std::snprintf(line, sizeof line,
                  "%d case(s) MOVED: the ceilings probed around them differ from the run's by more than the "
                  "tolerance (another process took cores or memory bandwidth); their fractions are not comparable\n",
                  moved);
    s += line;
  }
  return s;
}

std::string to_json(const Ceilings& ceilings, const std::vector<Row>& rows, int indent) {
  nlohmann::json j;
  j["ceilings"] = {{"device", ceilings.device},          {"device_name", ceilings.device_name},
                   {"threads", ceilings.threads},        {"bandwidth_gbps", ceilings.bandwidth_gbps},
                   {"f32_gflops", ceilings.f32_gflops},  {"f16_gflops", ceilings.f16_gflops},
                   {"bf16_gflops", ceilings.bf16_gflops}};
  j["rows"] = nlohmann::json::array();
  for (const Row& r : rows) {
    const BenchCase& c = r.bench_case;
    j["rows"].push_back({{"name", c.name()},
                         {"label", c.label},
                         {"phase", phase_name(c.phase)},
                         {"backend", c.backend},
                         {"device", device_name(c.device)},
                         {"num_heads", c.dims.num_heads},
                         {"kv_lora_rank", c.dims.kv_lora_rank},
                         {"qk_nope_head_dim", c.dims.qk_nope_head_dim},
                         {"qk_rope_head_dim", c.dims.qk_rope_head_dim},
                         {"v_head_dim", c.dims.v_head_dim},
                         {"dtype", dtype_name(c.dtype)},
                         {"kv_cache_dtype", dtype_name(c.kv_cache_dtype)},
                         {"batch", c.batch},
                         {"query_len", c.query_len},
                         {"context_len", c.context_len},
                         {"context_chunks", c.context_chunks},
                         {"seq_len", c.seq_len},
                         {"block_size", c.block_size},
                         {"num_threads", c.num_threads},
                         {"flops", r.work.flops},
                         {"bytes", r.work.bytes},
                         {"median_us", r.measurement.median_us},
                         {"min_us", r.measurement.min_us},
                         {"max_us", r.measurement.max_us},
                         {"samples_us", r.measurement.samples_us},
                         {"gflops", r.gflops},
                         {"gbps", r.gbps},
                         {"compute_peak_gflops", r.compute_peak_gflops},
                         {"roofline_us", r.roofline_us},
                         {"roofline_fraction", r.roofline_fraction},
                         {"bound", r.bound},
                         {"paired_ceilings", r.paired},
                         {"ceilings_checked", r.ceilings_checked},
                         {"ceiling_drift", r.ceiling_drift},
                         {"ceilings_moved", r.ceilings_moved}});
    if (r.paired) j["rows"].back()["paired_fractions"] = paired_fractions(c, r.work, r.measurement);
  }
  return j.dump(indent);
}

}  // namespace lattn::bench
