// `lattn bench`: sweeps of prefill and decode cases through the shared
// benchmark harness (bench/harness), judged against ceilings measured in the
// same run; a table, CSV or JSON, and optionally a plot drawn by
// scripts/plot_bench.py from that JSON.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>
#include <nlohmann/json.hpp>

#include "backend_report.h"
#include "commands.h"
#include "dcp_run.h"
#include "exit_codes.h"
#include "harness/harness.h"
#include "harness/sparse_cases.h"
#include "lattn/errors.h"
#include "lattn/kernel_label.h"
#include "layer_options.h"
#include "plot.h"
#include "provenance.h"

namespace lattn::cli {
namespace {

struct BenchOptions {
  LayerFlags layer;
  std::string phases = "prefill,decode";
  std::string heads;  // "" = the model's heads per rank
  std::string batches = "1,4";
  std::string seqs = "512,2048";
  std::string contexts = "0";
  int context_chunks = 4;
  std::string block_sizes = "64";
  std::string backends;  // "" = the selector's choice per case
  std::string output = "table";
  std::string plot;
  int warmup = 1;
  int repeats = 5;
  int threads = 0;
  uint64_t seed = 1234;  // the cases' random inputs
  bool pair_ceilings = false;
  std::string ceiling_check = "auto";  // auto: on for the CPU
  bool quiet = false;
  int dcp = 0;  // --dcp N: DCP decode steps at world 1 and N (tools/dcp_run.h)
  std::string dcp_combine = "ag-rs";
};

std::vector<std::string> split_list(const std::string& text, const char* flag) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) throw CliError(kExitUsage, std::string(flag) + " has an empty item in '" + text + "'");
    items.push_back(item);
  }
  if (items.empty()) throw CliError(kExitUsage, std::string(flag) + " needs at least one value");
  return items;
}

std::vector<int> int_list(const std::string& text, const char* flag, int minimum) {
  std::vector<int> values;
  for (const std::string& item : split_list(text, flag)) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < minimum) {
      throw CliError(kExitUsage, std::string(flag) + " takes integers >= " + std::to_string(minimum) +
                                     " separated by commas; got '" + item + "'");
    }
    values.push_back(v);
  }
  return values;
}

// The backend a case runs: the named one (checked), or the selector's.
std::string backend_for(const bench::BenchCase& c, const std::string& requested, const LayerSetup& base) {
  LayerSetup setup = base;
  setup.dims = c.dims;
  setup.block_size = c.block_size;
  const BackendKind kind = c.phase == bench::Phase::prefill ? BackendKind::prefill : BackendKind::decode;
  (kind == BackendKind::prefill ? setup.prefill_backend : setup.decode_backend) =
      canonical_backend_name(kind, requested, "--backend");
  const ResolvedBackends names = require_servable_backends(setup);  // throws with every backend's reasons
  const std::string& name = kind == BackendKind::prefill ? names.prefill : names.decode;
  if (!name.empty()) return name;
  return list_backends(kind, setup).selected;
}

std::string csv(const std::vector<bench::Row>& rows) {
  std::string s =
      "name,label,phase,backend,device,num_threads,num_heads,kv_lora_rank,qk_nope_head_dim,qk_rope_head_dim,v_head_dim,"
      "dtype,"
      "kv_cache_dtype,batch,query_len,context_len,context_chunks,seq_len,block_size,flops,bytes,median_us,min_us,"
      "gflops,gbps,compute_peak_gflops,roofline_us,roofline_fraction,bound,max_us,ceiling_drift,ceilings_moved\n";
  char line[1024];
  for (const bench::Row& r : rows) {
    const bench::BenchCase& c = r.bench_case;
    std::snprintf(
        line, sizeof line,
        "%s,\"%s\",%s,%s,%s,%d,%d,%d,%d,%d,%d,%s,%s,%d,%d,%d,%d,%d,%d,%.6g,%.6g,%.3f,%.3f,%.4g,%.4g,%.4g,%.3f,"
        "%.4f,%s,%.3f,%.4f,%d\n",
        c.name().c_str(), c.label.c_str(), bench::phase_name(c.phase), c.backend.c_str(), device_name(c.device).c_str(),
        c.num_threads, c.dims.num_heads, c.dims.kv_lora_rank, c.dims.qk_nope_head_dim, c.dims.qk_rope_head_dim,
        c.dims.v_head_dim, dtype_flag_name(c.dtype), dtype_flag_name(c.kv_cache_dtype), c.batch, c.query_len,
        c.context_len, c.context_chunks, c.seq_len, c.block_size, r.work.flops, r.work.bytes, r.measurement.median_us,
        r.measurement.min_us, r.gflops, r.gbps, r.compute_peak_gflops, r.roofline_us, r.roofline_fraction,
        r.bound.c_str(), r.measurement.max_us, r.ceiling_drift, int(r.ceilings_moved));
    s += line;
  }
  return s;
}

std::vector<bench::BenchCase> sweep(const BenchOptions& o, const LayerSetup& setup) {
  std::vector<bench::Phase> phases;
  for (const std::string& p : split_list(o.phases, "--phase")) {
    if (p == "prefill") {
      phases.push_back(bench::Phase::prefill);
    } else if (p == "decode") {
      phases.push_back(bench::Phase::decode);
    } else if (p != "sparse-decode" && p != "sparse-prefill" && p != "indexer") {  // those: sparse_bench below
      throw CliError(kExitUsage,
                     "--phase takes prefill, decode, sparse-decode, sparse-prefill and/or indexer separated "
                     "by commas; got '" +
                         p + "'");
    }
  }
  const std::vector<int> heads =
      o.heads.empty() ? std::vector<int>{setup.dims.num_heads} : int_list(o.heads, "--heads", 1);
  const std::vector<int> batches = int_list(o.batches, "--batch", 1);
  const std::vector<int> seqs = int_list(o.seqs, "--seq", 1);
  const std::vector<int> contexts = int_list(o.contexts, "--context", 0);
  const std::vector<int> block_sizes = int_list(o.block_sizes, "--block-size", 1);
  const std::vector<std::string> backends =
      o.backends.empty() ? std::vector<std::string>{""} : split_list(o.backends, "--backend");
  if (o.context_chunks < 1) throw CliError(kExitUsage, "--context-chunks must be at least 1");

  std::vector<bench::BenchCase> cases;
  for (const bench::Phase phase : phases) {
    for (const std::string& backend : backends) {
      for (const int h : heads) {
        for (const int b : batches) {
          for (const int s : seqs) {
            // prefill: s new tokens per request, for each context length; decode: s tokens of context, per block size.
            const std::vector<int>& variants = phase == bench::Phase::prefill ? contexts : block_sizes;
            for (const int v : variants) {
              bench::BenchCase c;
              c.phase = phase;
              c.dims = setup.dims;
              c.dims.num_heads = h;
              c.dtype = setup.dtype;
              c.kv_cache_dtype = setup.kv_cache_dtype;
              c.batch = b;
              c.device = setup.device;
              // The thread count the CPU runs use (0 means all: say how many that is).
              c.num_threads = o.threads > 0 || !setup.device.is_cpu() ? o.threads : omp_get_max_threads();
              c.batch_invariant = o.layer.batch_invariant;
              if (phase == bench::Phase::prefill) {
                c.query_len = s;
                c.context_len = v;
                c.context_chunks = v > 0 ? o.context_chunks : 0;
                c.block_size = block_sizes.front();
              } else {
                c.query_len = 1;
                c.seq_len = s;
                c.block_size = v;
              }
              c.backend = backend_for(c, backend, setup);
              c.label = backend_kernel_label(c.backend, c.device, c.dtype);  // what runs, in words
              try {
                c.validate();
              } catch (const ValueError& e) {
                throw CliError(kExitUsage, std::string("case ") + c.name() + ": " + e.what());
              }
              cases.push_back(c);
            }
          }
        }
      }
    }
  }
  return cases;
}

std::unique_ptr<bench::DeviceRunner> make_runner(const LayerSetup& setup, int threads) {
  try {
    return bench::make_runner(setup.device, threads);
  } catch (const ValueError& e) {  // a CUDA device asked of a build without CUDA
    throw CliError(kExitNoBackend, std::string("lattn bench cannot time ") + device_name(setup.device) + ": " +
                                       e.what() + "; use --device cpu");
  }
}

// The sparse-MLA phases (bench/harness/sparse_cases.h): their fixed target
// cases on the CPU, judged against the CPU ceilings of the same run.
void sparse_bench(const BenchOptions& o, const std::vector<bench::SparsePhase>& phases, const LayerSetup& setup) {
  if (!setup.device.is_cpu()) {
    throw CliError(kExitUsage, "--phase sparse-decode/sparse-prefill/indexer run on the CPU only (got --device " +
                                   device_name(setup.device) + ")");
  }
  if (!o.quiet) std::fprintf(stderr, "measuring the CPU ceilings...\n");
  const bench::Ceilings before = bench::measure_cpu_ceilings(o.threads);
  std::vector<bench::SparseRow> rows;
  for (bench::SparseCase c : bench::sparse_target_cases(phases)) {
    c.threads = o.threads;
    if (!o.backends.empty()) c.backend = o.backends;
    if (!o.quiet) std::fprintf(stderr, "%s\n", c.name().c_str());
    rows.push_back(bench::time_sparse_case(c, o.repeats));
  }
  std::fputs(bench::format_sparse_table(bench::best_of(before, bench::measure_cpu_ceilings(o.threads)), rows).c_str(),
             stdout);
  std::fflush(stdout);
}

// --dcp N: median decode step time with the cache on one rank and sharded
// over N ranks, for every --batch and --seq (the context), and the speedup.
int bench_dcp(const BenchOptions& o, const LayerSetup& setup) {
  std::printf(
      "DCP decode bench: %s tp %d (%d heads per rank), %s, cache %s, block 64, combine %s; median of %d "
      "steps after %d warm-up (wall ms, slowest rank)\n",
      setup.model.c_str(), setup.tp, setup.dims.num_heads, dtype_flag_name(setup.dtype),
      dtype_flag_name(setup.kv_cache_dtype), o.dcp_combine.c_str(), o.repeats, o.warmup);
  std::printf("%-6s %-8s %12s %12s %9s\n", "batch", "context", "dcp1_ms", "dcpN_ms", "speedup");
  for (int batch : int_list(o.batches, "--batch", 1)) {
    for (int seq : int_list(o.seqs, "--seq", 1)) {
      DcpRunOptions d;
      d.method = parse_dcp_combine(o.dcp_combine);
      d.num_requests = batch;
      d.context = seq;
      d.steps = o.warmup + o.repeats;
      d.seed = o.seed;
      auto median_after_warmup = [&](int world) {
        d.world = world;
        if (!o.quiet) std::fprintf(stderr, "batch %d context %d: %d rank(s)...\n", batch, seq, world);
        const DcpRunReport r = run_dcp_decode(setup, d);
        std::vector<double> t(r.step_ms.begin() + o.warmup, r.step_ms.end());
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
      };
      const double one = median_after_warmup(1), many = median_after_warmup(o.dcp);
      std::printf("%-6d %-8d %12.3f %12.3f %8.2fx (dcp %d)\n", batch, seq, one, many, one / many, o.dcp);
    }
  }
  return kExitOk;
}

int bench_command(const BenchOptions& o) {
  LayerSetup setup = resolve_layer_setup(o.layer);
  if (o.dcp > 0) {
    if (o.repeats < 1 || o.warmup < 0) throw CliError(kExitUsage, "--repeats must be >= 1 and --warmup >= 0");
    setup.block_size = 64;
    return bench_dcp(o, setup);
  }
  std::vector<bench::SparsePhase> sparse_phases;
  bool dense = false;
  for (const std::string& p : split_list(o.phases, "--phase")) {
    if (p == "sparse-decode")
      sparse_phases.push_back(bench::SparsePhase::decode);
    else if (p == "sparse-prefill")
      sparse_phases.push_back(bench::SparsePhase::prefill);
    else if (p == "indexer")
      sparse_phases.push_back(bench::SparsePhase::indexer);
    else
      dense = true;
  }
  if (!sparse_phases.empty()) {
    sparse_bench(o, sparse_phases, setup);
    if (!dense) return kExitOk;
  }
  if (o.output != "table" && o.output != "csv" && o.output != "json") {
    throw CliError(kExitUsage, "-o/--output must be table, csv or json; got '" + o.output + "'");
  }
  if (o.warmup < 0 || o.repeats < 1) {
    throw CliError(kExitUsage, "--warmup must be >= 0 and --repeats >= 1");
  }
  if (!o.plot.empty()) {
    // Checked before measuring anything: a typo in the folder must not cost the whole sweep.
    const std::filesystem::path folder = std::filesystem::path(o.plot).parent_path();
    std::error_code error;
    if (!folder.empty() && !std::filesystem::is_directory(folder, error)) {
      throw CliError(kExitUsage, "--plot: the folder '" + folder.string() +
                                     "' does not exist (create it, or give "
                                     "a PNG path in an existing folder)");
    }
  }
  // More threads than this only time-share the processors (and a huge count
  // exhausts OpenMP's thread stacks).
  const int max_threads = 4 * int(std::max(1u, std::thread::hardware_concurrency()));
  if (o.threads < 0 || o.threads > max_threads) {
    throw CliError(kExitUsage, "--threads must be in [0, " + std::to_string(max_threads) +
                                   "] (0: all; at most 4 x the " + std::to_string(max_threads / 4) +
                                   " hardware threads), got " + std::to_string(o.threads));
  }
  if (o.ceiling_check != "auto" && o.ceiling_check != "on" && o.ceiling_check != "off") {
    throw CliError(kExitUsage, "--ceiling-check must be auto, on or off; got '" + o.ceiling_check + "'");
  }
  const bool check = o.ceiling_check == "on" || (o.ceiling_check == "auto" && setup.device.is_cpu());
  const std::vector<bench::BenchCase> cases = sweep(o, setup);
  auto runner = make_runner(setup, o.threads);
  if (!o.quiet) std::fprintf(stderr, "measuring the ceilings of %s...\n", device_name(setup.device).c_str());
  bench::Ceilings ceilings = runner->measure_ceilings({});

  // Short probes between cases (each serves the case before and the one
  // after it) show whether a case ran with the ceilings it is judged by:
  // the paired mode's probes (one 30 ms trial per compute peak: sensitive to
  // another process, as they should be; a best of three 10 ms trials flagged
  // fewer of the cases that the load disturbed). Their triad is smaller than
  // the start's and partly fits in the last-level cache, so it reads 5-20 %
  // higher on an idle machine: probe bandwidths are compared with each
  // other, never with the start's.
  const bench::CeilingOptions probe = bench::RunOptions{}.pair_options;
  std::vector<bench::Ceilings> probes;  // probes[i] before case i, probes[i + 1] after it
  if (check) probes.push_back(runner->measure_ceilings(probe));
  std::vector<bench::BenchCase> ran_cases;
  std::vector<bench::Measurement> measurements;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!o.quiet) std::fprintf(stderr, "[%zu/%zu] %s\n", i + 1, cases.size(), cases[i].name().c_str());
    bench::RunOptions run;
    run.warmup = o.warmup;
    run.repeats = o.repeats;
    run.pair_ceilings = o.pair_ceilings;
    run.seed = o.seed;
    measurements.push_back(bench::time_case(*runner, cases[i], run));
    // The row names what ran: the backend instance's label after the timed
    // runs (a CUDA case's tiles and split-KV parts), not the one guessed before.
    ran_cases.push_back(cases[i]);
    if (!measurements.back().kernel_label.empty()) ran_cases.back().label = measurements.back().kernel_label;
    if (check) probes.push_back(runner->measure_ceilings(probe));
  }
  // Every case is judged by the best of all the run's measurements of each
  // compute peak: a start measured while another process held a core would
  // otherwise lower the peaks and inflate every fraction of the run. The
  // probes' bandwidths are compared with their median (the triad varies by
  // about ±10 % between probes on an idle machine, the bf16 peak by 4 %).
  bench::Ceilings reference = ceilings;  // what the probes are compared with
  if (!probes.empty()) {
    for (const bench::Ceilings& p : probes) reference = bench::best_of(reference, p);
    ceilings.f32_gflops = reference.f32_gflops;
    ceilings.f16_gflops = reference.f16_gflops;
    ceilings.bf16_gflops = reference.bf16_gflops;
    std::vector<double> bandwidths;
    for (const bench::Ceilings& p : probes) bandwidths.push_back(p.bandwidth_gbps);
    std::nth_element(bandwidths.begin(), bandwidths.begin() + bandwidths.size() / 2, bandwidths.end());
    reference.bandwidth_gbps = bandwidths[bandwidths.size() / 2];
  }
  std::vector<bench::Row> rows;
  for (size_t i = 0; i < ran_cases.size(); ++i) {
    rows.push_back(bench::make_row(ran_cases[i], measurements[i], ceilings));
    if (check) bench::check_ceiling_drift(rows.back(), reference, {probes[i], probes[i + 1]});
  }

  // The harness's JSON (ceilings and rows) after the provenance fields.
  const std::string json = with_provenance(nlohmann::ordered_json::parse(bench::to_json(ceilings, rows))).dump(2);
  if (o.output == "json") {
    std::printf("%s\n", json.c_str());
  } else if (o.output == "csv") {
    std::fputs(csv(rows).c_str(), stdout);
  } else {
    std::fputs(bench::format_table(ceilings, rows).c_str(), stdout);
  }
  std::fflush(stdout);
  if (!o.plot.empty()) plot_bench_json(json, o.plot);
  return kExitOk;
}

}  // namespace

Subcommand add_bench_command(CLI::App& root) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* app = root.add_subcommand(
      "bench",
      "Benchmark prefill and decode through the shared harness: every combination of the comma-separated lists "
      "below is one case, timed (median of --repeats after --warmup) and judged against this machine's ceilings "
      "measured in the same run (compute peak and memory bandwidth): GFLOP/s, GB/s and the fraction of the "
      "roofline.");
  add_layer_flags(*app, o->layer, FlagSet{.block_size = false, .backends = false});
  const std::string sweep_group = "Sweep (comma-separated lists)";
  app->add_option("--phase", o->phases,
                  "prefill, decode, sparse-decode, sparse-prefill, indexer (the sparse phases: fixed DeepSeek-V3.2 "
                  "target cases on the CPU)")
      ->capture_default_str()
      ->group(sweep_group);
  app->add_option("--heads", o->heads, "Heads per rank (default: the model's, after --tp)")->group(sweep_group);
  app->add_option("--batch", o->batches, "Requests per case")->capture_default_str()->group(sweep_group);
  app->add_option("--seq", o->seqs, "prefill: new tokens per request; decode: tokens in the cache per request")
      ->capture_default_str()
      ->group(sweep_group);
  app->add_option("--context", o->contexts, "prefill: cached context tokens per request, attended in chunks")
      ->capture_default_str()
      ->group(sweep_group);
  app->add_option("--context-chunks", o->context_chunks, "prefill: chunks the context is split into")
      ->capture_default_str()
      ->group(sweep_group);
  app->add_option("--block-size", o->block_sizes, "decode: tokens per cache block")
      ->capture_default_str()
      ->group(sweep_group);
  app->add_option("--backend", o->backends, "Backends by name (default: the selector's choice for each case)")
      ->group(sweep_group);
  const std::string out = "Output";
  app->add_option("-o,--output", o->output, "table, csv or json (the harness's JSON: ceilings and rows)")
      ->capture_default_str()
      ->group(out);
  app->add_option("--plot", o->plot,
                  "Also draw throughput and roofline fraction against shape into this PNG "
                  "(scripts/plot_bench.py, run by /usr/bin/python3 with python3-matplotlib)")
      ->group(out);
  app->add_option("--warmup", o->warmup, "Untimed runs per case")->capture_default_str()->group(out);
  app->add_option("--repeats", o->repeats, "Timed runs per case (the median is reported, with the min and max)")
      ->capture_default_str()
      ->group(out);
  app->add_option("--threads", o->threads, "CPU threads (0: all)")->capture_default_str()->group(out);
  app->add_option("--seed", o->seed, "Seed of the cases' random inputs (the same seed, the same data)")
      ->capture_default_str()
      ->group(out);
  app->add_flag("--pair-ceilings", o->pair_ceilings,
                "Shared machines: re-measure the ceilings (short probes) before every timed repeat and report the "
                "median of the per-repeat roofline fractions")
      ->group(out);
  app->add_option("--ceiling-check", o->ceiling_check,
                  "auto, on or off: probe the ceilings briefly between cases and flag cases whose ceilings moved by "
                  "more than 15 % from the run's (MOVED in the table; ceilings_moved in JSON and CSV). auto: on for "
                  "the CPU")
      ->capture_default_str()
      ->group(out);
  app->add_flag("-q,--quiet", o->quiet, "No progress lines on stderr")->group(out);
  const std::string dcp = "Decode context parallelism (docs/dcp.md)";
  app->add_option("--dcp", o->dcp,
                  "Time decode steps with every request's cache (--seq tokens) on one rank and sharded over N ranks "
                  "(threads + in-process communicator on the CPU; one GPU per rank with NCCL on CUDA, N GPUs "
                  "needed) and print the speedup")
      ->check(CLI::NonNegativeNumber)
      ->group(dcp);
  app->add_option("--dcp-combine", o->dcp_combine, "ag-rs or all-to-all")->capture_default_str()->group(dcp);
  app->footer(exit_codes_help());
  return {app, [o]() { return bench_command(*o); }};
}

}  // namespace lattn::cli
