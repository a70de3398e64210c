// `lattn run`: a serving-shaped workload through MLA attention layers — the
// main job (`make demo` runs it with no arguments).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include "backend_report.h"
#include "commands.h"
#include "dcp_run.h"
#include "exit_codes.h"
#include "lattn/errors.h"
#include "lattn/overflow.h"
#include "layer_options.h"
#include "progress.h"
#include "provenance.h"
#include "run_output.h"
#include "serving/engine.h"
#include "serving/trace.h"

namespace lattn::cli {
namespace {

struct RunOptions {
  LayerFlags layer;
  int layers = 2;
  serving::SchedulerConfig scheduler;
  serving::TraceConfig trace;
  std::string trace_file;
  std::string save_trace;
  int verify_requests = 4;
  bool verify = false;
  std::string clock = "measured";
  bool json = false;
  bool quiet = false;
  // --dcp N: decode steps under decode context parallelism (tools/dcp_run.h).
  int dcp = 0;
  int dcp_interleave = 1;
  std::string dcp_combine = "ag-rs";
  int dcp_requests = 4, dcp_context = 300, dcp_steps = 4, dcp_prefill_chunk = 0;
  std::vector<CLI::Option*> generator_options;  // shape a generated trace; meaningless with --trace
};

std::string format_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Loads or generates the trace, and describes it.
std::vector<serving::Request> make_trace(const RunOptions& o, RunDescription& description) {
  std::vector<serving::Request> trace;
  if (!o.trace_file.empty()) {
    try {
      trace = serving::load_trace_jsonl(o.trace_file);
    } catch (const serving::TraceError& e) {
      throw CliError(kExitBadInput, e.what());
    }
    description.trace = o.trace_file + " (" + std::to_string(trace.size()) + " requests)";
    description.trace_json = {{"file", o.trace_file}, {"requests", trace.size()}};
  } else {
    try {
      trace = serving::generate_trace(o.trace);
    } catch (const std::invalid_argument& e) {
      throw CliError(kExitUsage, e.what());
    }
    const serving::TraceConfig& t = o.trace;
    const std::string rate = (t.request_rate > 0 && std::isfinite(t.request_rate))
                                 ? format_number(t.request_rate) + " requests/s (Poisson)"
                                 : "all at t = 0";
    description.trace = std::to_string(t.num_requests) + " generated requests, seed " + std::to_string(t.seed) + ": " +
                        rate + "; prompts log-normal, median " + format_number(t.prompt_len_median) + " sigma " +
                        format_number(t.prompt_len_sigma) + " (max " + std::to_string(t.max_prompt_len) +
                        "); outputs geometric, mean " + format_number(t.output_len_mean) + " (max " +
                        std::to_string(t.max_output_len) + ")";
    description.trace_json = {{"generated", true},
                              {"requests", t.num_requests},
                              {"seed", t.seed},
                              {"request_rate", std::isfinite(t.request_rate) ? nlohmann::ordered_json(t.request_rate)
                                                                             : nlohmann::ordered_json("inf")},
                              {"prompt_len_median", t.prompt_len_median},
                              {"prompt_len_sigma", t.prompt_len_sigma},
                              {"max_prompt_len", t.max_prompt_len},
                              {"output_len_mean", t.output_len_mean},
                              {"max_output_len", t.max_output_len}};
  }
  int64_t prompt_tokens = 0, output_tokens = 0;
  for (const auto& r : trace) {
    prompt_tokens += r.prompt_len;
    output_tokens += r.output_len;
  }
  description.trace +=
      "; " + std::to_string(prompt_tokens) + " prompt + " + std::to_string(output_tokens) + " output tokens";
  description.trace_json["prompt_tokens"] = prompt_tokens;
  description.trace_json["output_tokens"] = output_tokens;
  if (!o.save_trace.empty()) {
    try {
      serving::save_trace_jsonl(trace, o.save_trace);
    } catch (const serving::TraceError& e) {
      throw CliError(kExitBadInput, e.what());
    }
  }
  return trace;
}

// Refuses, before anything is allocated, a scheduler shape the context
// workspace cannot hold and caches larger than this machine's memory (CPU).
// The arithmetic is 64-bit and overflow-checked: flags are int32 each, but
// their products are not.
void check_fits(const serving::SchedulerConfig& s, const LayerSetup& layer, int layers) {
  constexpr int64_t kWorkspaceRows = int64_t(128) * 1024;  // mla_context_chunk_workspace_size's cap
  const int64_t seq_rows = int64_t(s.max_num_seqs) * s.block_size;
  if (seq_rows > kWorkspaceRows) {
    throw CliError(kExitUsage, "--max-num-seqs " + std::to_string(s.max_num_seqs) + " x --block-size " +
                                   std::to_string(s.block_size) + " = " + std::to_string(seq_rows) +
                                   " tokens exceeds the context workspace of " + std::to_string(kWorkspaceRows) +
                                   " tokens; at most " + std::to_string(kWorkspaceRows / s.block_size) +
                                   " sequences fit at this block size");
  }
  int64_t bytes = 0;
  try {
    // A sparse model's indexer keeps D fp8 values and one f32 scale per token too.
    const int64_t entry_bytes =
        cache_entry_bytes(layer.dims, layer.kv_cache_dtype) + (layer.sparse() ? layer.indexer.index_head_dim + 4 : 0);
    const int64_t block_bytes = checked_mul(entry_bytes, s.block_size, "cache block");
    bytes = checked_mul(checked_mul(block_bytes, s.num_blocks, "cache"), layers, "caches");
  } catch (const ValueError&) {
    bytes = std::numeric_limits<int64_t>::max();
  }
  // The memory the caches live in: the GPU's (an allocation that fits its
  // total may still fail later: it then reports itself, exit 3), or the host's.
  int64_t memory = 0;
  std::string where = "this machine's";
  if (layer.device.is_cuda()) {
    for (const CudaDeviceInfo& d : query_cuda_devices().devices) {
      if (d.index == layer.device.index) memory = int64_t(d.total_memory_bytes);
    }
    where = device_name(layer.device) + "'s";
  } else {
    const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) memory = int64_t(pages) * page_size;
  }
  if (memory <= 0) return;
  if (bytes > memory) {
    const double per_block = double(cache_entry_bytes(layer.dims, layer.kv_cache_dtype) +
                                    (layer.sparse() ? layer.indexer.index_head_dim + 4 : 0)) *
                             s.block_size * layers;
    throw CliError(kExitNoBackend,
                   "--num-blocks " + std::to_string(s.num_blocks) + " x --block-size " + std::to_string(s.block_size) +
                       " x --layers " + std::to_string(layers) + " needs " +
                       (bytes == std::numeric_limits<int64_t>::max() ? std::string("more than 2^63")
                                                                     : std::to_string(bytes >> 20) + " MiB") +
                       " of latent cache, more than " + where + " " + std::to_string(memory >> 20) +
                       " MiB of memory; at most " + std::to_string(int64_t(double(memory) / per_block)) +
                       " blocks fit");
  }
}

// Why --verify failed, as a sentence.
std::string verify_failure(const serving::VerifyReport& v, const LayerSetup& layer) {
  for (const serving::VerifiedRequest& r : v.requests) {
    if (!r.finite) return "--verify: request " + std::to_string(r.id) + " has outputs that are not finite (NaN or inf)";
    if (!r.complete) {
      return "--verify: the run produced " + std::to_string(r.positions) + " of the " +
             std::to_string(r.prompt_len + r.output_len - 1) + " positions of request " + std::to_string(r.id);
    }
  }
  char message[256];
  std::snprintf(message, sizeof message,
                "--verify: the worst relative error %.3e (request %lld, layer %d) exceeds the bound %.0e for %s "
                "activations",
                v.worst_rel_l2, (long long)v.worst_request, v.worst_layer, v.bound, dtype_flag_name(layer.dtype));
  return message;
}

// --dcp N: the DCP decode run instead of the serving simulation.
int run_dcp_command(const RunOptions& o) {
  const LayerSetup layer = resolve_layer_setup(o.layer);
  DcpRunOptions d;
  d.world = o.dcp;
  d.interleave = o.dcp_interleave;
  d.method = parse_dcp_combine(o.dcp_combine);
  d.num_requests = o.dcp_requests;
  d.context = o.dcp_context;
  d.steps = o.dcp_steps;
  d.prefill_chunk = o.dcp_prefill_chunk;
  d.verify = o.verify;
  d.seed = o.trace.seed;
  (void)require_servable_backends(layer);
  const DcpRunReport report = run_dcp_decode(layer, d);
  if (o.json) {
    std::printf("%s\n", with_provenance(dcp_report_json(layer, d, report)).dump(2).c_str());
  } else {
    print_dcp_report(layer, d, report);
  }
  if (report.verified && !report.passed) {
    char message[256];
    std::snprintf(message, sizeof message,
                  "--verify: the DCP output differs from the single-rank output by %.3e (step %d, rank %d), beyond "
                  "the bound %.0e for %s activations",
                  report.worst_rel_l2, report.worst_step, report.worst_rank, report.bound,
                  dtype_flag_name(layer.dtype));
    throw CliError(kExitVerifyFailed, message);
  }
  return kExitOk;
}

int run_command(const RunOptions& o) {
  if (o.dcp > 0) return run_dcp_command(o);
  if (!o.trace_file.empty()) {
    for (const CLI::Option* option : o.generator_options) {
      if (option->count() > 0) {
        throw CliError(kExitUsage, option->get_name() +
                                       " shapes a generated trace; it cannot be combined with --trace, "
                                       "which replays the requests of a file");
      }
    }
  }
  RunDescription description;
  description.layer = resolve_layer_setup(o.layer);
  const LayerSetup& layer = description.layer;
  if (o.layers < 1) throw CliError(kExitUsage, "--layers must be at least 1, got " + std::to_string(o.layers));
  if (o.verify && o.verify_requests < 1) {
    throw CliError(kExitUsage, "--verify-requests must be at least 1, got " + std::to_string(o.verify_requests));
  }
  serving::SchedulerConfig scheduler = o.scheduler;
  scheduler.block_size = layer.block_size;
  scheduler.shuffle_seed = o.trace.seed;
  try {
    scheduler.validate();
  } catch (const std::invalid_argument& e) {
    throw CliError(kExitUsage, e.what());
  }
  check_fits(scheduler, layer, o.layers);
  description.num_layers = o.layers;
  description.scheduler = scheduler;
  description.seed = o.trace.seed;

  // Backends first: an impossible configuration fails before any work.
  const ResolvedBackends backends = layer.sparse() ? require_sparse_backend(layer) : require_servable_backends(layer);
  const std::vector<serving::Request> trace = make_trace(o, description);

  serving::EngineConfig config;
  config.dims = layer.dims;
  config.num_layers = o.layers;
  config.dtype = layer.dtype;
  config.kv_cache_dtype = layer.kv_cache_dtype;
  config.device = layer.device;
  config.prefill_backend = backends.prefill;
  config.decode_backend = backends.decode;
  config.indexer = layer.indexer;
  config.sparse_backend = layer.sparse_backend;
  config.indexer_backend = layer.indexer_backend;
  config.scheduler = scheduler;
  config.seed = o.trace.seed;
  config.verify_requests = o.verify ? o.verify_requests : 0;
  if (!o.quiet) {
    config.on_verify_start = [](int64_t requests) {
      std::fprintf(stderr, "verifying %lld requests against the reference backend (fp64)...\n", (long long)requests);
    };
  }
  if (o.clock != "measured" && o.clock != "virtual") {
    throw CliError(kExitUsage, "--clock must be measured or virtual; got '" + o.clock + "'");
  }
  config.virtual_clock = o.clock == "virtual";
  description.virtual_clock = config.virtual_clock;

  // --verify also stops at any device-resident index a kernel found outside
  // the cache (cuda/common/index_check.h), naming the argument.
  if (o.verify) setenv("LATTN_CHECK_INDICES", "1", 0);
  serving::ServingEngine engine(config);
  try {
    engine.check_trace(trace);
  } catch (const std::invalid_argument& e) {
    throw CliError(kExitNoBackend, e.what());
  }
  if (!o.json) print_run_header(stdout, description);

  ProgressDisplay progress(ProgressDisplay::detect(o.quiet), int64_t(trace.size()));
  const serving::RunReport report =
      engine.run(trace, [&](const serving::StepStats& step, const serving::Scheduler&) { progress.update(step); });
  progress.finish();

  if (o.json) {
    std::printf("%s\n", with_provenance(run_report_json(description, report)).dump(2).c_str());
  } else {
    print_run_summary(stdout, description, report);
  }
  if (report.verify && !report.verify->passed) throw CliError(kExitVerifyFailed, verify_failure(*report.verify, layer));
  return kExitOk;
}

}  // namespace

Subcommand add_run_command(CLI::App& root) {
  auto o = std::make_shared<RunOptions>();
  o->scheduler.max_num_batched_tokens = 512;
  o->scheduler.max_num_seqs = 32;
  o->scheduler.num_blocks = 128;
  CLI::App* app = root.add_subcommand(
      "run",
      "Serve a request trace through MLA attention layers: a seeded trace (or --trace FILE.jsonl), a continuous-"
      "batching scheduler (token budget, chunked prefill, decodes first), a block allocator over the paged latent "
      "cache, the metadata builder and MlaAttention::forward on every layer. Prints progress, then throughput, step "
      "latency, cache use and the backends that ran.");
  add_layer_flags(*app, o->layer);
  app->add_option("--layers", o->layers, "Attention layers per step, each with its own cache and random weights")
      ->capture_default_str()
      ->group("Model");

  const std::string sched = "Scheduler and cache";
  app->add_option("--max-num-batched-tokens", o->scheduler.max_num_batched_tokens,
                  "Token budget of one step (decode tokens + prefill chunk tokens)")
      ->capture_default_str()
      ->group(sched);
  app->add_option("--max-num-seqs", o->scheduler.max_num_seqs, "Requests running at once")
      ->capture_default_str()
      ->group(sched);
  app->add_option("--num-blocks", o->scheduler.num_blocks,
                  "Blocks in each layer's latent cache (a request that cannot get blocks waits)")
      ->capture_default_str()
      ->group(sched);

  const std::string tr = "Trace";
  app->add_option("--trace", o->trace_file,
                  "Replay a JSON-lines trace: one {\"prompt_len\": N, \"output_len\": M, \"arrival_s\": T} per line "
                  "(arrival_s optional, default 0)")
      ->group(tr);
  std::vector<CLI::Option*> generator = {
      app->add_option("--num-requests", o->trace.num_requests, "Requests to generate")->capture_default_str(),
      app->add_option("--request-rate", o->trace.request_rate,
                      "Poisson arrivals per second of engine time (inf: all at once)")
          ->capture_default_str(),
      app->add_option("--prompt-len-median", o->trace.prompt_len_median, "Median prompt length (log-normal)")
          ->capture_default_str(),
      app->add_option("--prompt-len-sigma", o->trace.prompt_len_sigma, "Log-normal sigma of prompt lengths")
          ->capture_default_str(),
      app->add_option("--max-prompt-len", o->trace.max_prompt_len, "Longest prompt (clamps the tail)")
          ->capture_default_str(),
      app->add_option("--output-len-mean", o->trace.output_len_mean, "Mean output length (geometric)")
          ->capture_default_str(),
      app->add_option("--max-output-len", o->trace.max_output_len, "Longest output (clamps the tail)")
          ->capture_default_str(),
  };
  for (CLI::Option* option : generator) option->group(tr);
  o->generator_options = generator;
  app->add_option("--clock", o->clock,
                  "measured: the engine clock advances by each step's measured time; virtual: by a modelled step "
                  "time (fixed overheads + FLOPs at a nominal 0.25 TFLOP/s), so a seed gives the same schedule and "
                  "summary on any machine")
      ->capture_default_str();
  app->add_option("--seed", o->trace.seed, "Seed of the trace, the weights, the activations and the block order")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(tr);
  app->add_option("--save-trace", o->save_trace, "Write the trace that runs as JSON lines (replay it with --trace)")
      ->group(tr);

  const std::string out = "Output";
  app->add_flag("--verify", o->verify,
                "Re-compute a sample of requests with the reference backend (fp64) and compare; exit 5 beyond the "
                "dtype's bound")
      ->group(out);
  app->add_option("--verify-requests", o->verify_requests, "How many requests --verify re-computes")
      ->capture_default_str()
      ->group(out);
  app->add_flag("--json", o->json, "Print the summary as one JSON object (progress still goes to stderr)")->group(out);

  const std::string dcp = "Decode context parallelism (docs/dcp.md)";
  app->add_option("--dcp", o->dcp,
                  "Run decode steps with every request's cache sharded over N ranks instead of the serving "
                  "simulation: threads with the in-process communicator on the CPU, one GPU per rank with NCCL on "
                  "CUDA (N GPUs needed); --verify compares every step with one rank; --tp composes")
      ->check(CLI::NonNegativeNumber)
      ->group(dcp);
  app->add_option("--dcp-interleave", o->dcp_interleave,
                  "Consecutive tokens per rank (vLLM's cp_kv_cache_interleave_size)")
      ->capture_default_str()
      ->group(dcp);
  app->add_option("--dcp-combine", o->dcp_combine, "How the partial results are combined: ag-rs or all-to-all")
      ->capture_default_str()
      ->group(dcp);
  app->add_option("--dcp-requests", o->dcp_requests, "Requests decoding together")->capture_default_str()->group(dcp);
  app->add_option("--dcp-context", o->dcp_context, "Tokens already in each request's cache")
      ->capture_default_str()
      ->group(dcp);
  app->add_option("--dcp-steps", o->dcp_steps, "Decode steps")->capture_default_str()->group(dcp);
  app->add_option("--dcp-prefill-chunk", o->dcp_prefill_chunk,
                  "Prefill the context through the layer under DCP, this many tokens per request per step (0: "
                  "write it straight into the ranks' shards)")
      ->capture_default_str()
      ->group(dcp);
  app->add_flag("-q,--quiet", o->quiet, "No progress display")->group(out);
  app->footer(exit_codes_help());
  return {app, [o]() { return run_command(*o); }};
}

}  // namespace lattn::cli
