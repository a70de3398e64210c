// tools/dcp_run.h — `lattn run --dcp N` and `lattn bench --dcp N`: decode
// steps through MlaAttention with decode context parallelism (docs/dcp.md).
//
// N ranks share every request's latent cache, token-interleaved. On the CPU
// the ranks are threads of this process joined by the in-process
// communicator; on CUDA each rank is a thread with its own GPU (cuda:0 ..
// cuda:N-1) joined by NCCL, and a machine with fewer GPUs is refused naming
// its count. Each rank builds its own layer (the same weights), its own cache
// holding its shard of every request's context, and runs the decode steps
// with build_dcp_metadata + MlaAttention::forward(plan). The context is
// written straight into the shards, or, with --dcp-prefill-chunk C, prefilled
// through the layer under DCP in steps of C tokens per request (each step
// attends to the context the earlier steps cached on every rank). --verify
// repeats every step (prefill and decode) on one rank with the whole cache
// and compares the outputs.
// --tp composes: the layer has the model's heads / tp (the engine's head
// split), and the DCP group shares each such layer's cache.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lattn/dcp.h"
#include "layer_options.h"

namespace lattn::cli {

struct DcpRunOptions {
  int world = 2;       // ranks
  int interleave = 1;  // tokens per rank in turn
  DcpCombineMethod method = DcpCombineMethod::all_gather_reduce_scatter;
  int num_requests = 4;
  int context = 300;      // tokens already in each request's cache
  int steps = 4;          // decode steps (one new token per request each)
  int prefill_chunk = 0;  // > 0: prefill the context through the layer, this many tokens per request per step
  bool verify = false;    // compare every step with one rank
  uint64_t seed = 0;
};

struct DcpRunReport {
  std::string communicator;     // "in-process" or "nccl"
  std::string decode_backend;   // what the layers run
  std::vector<double> step_ms;  // wall time of each decode step (slowest rank, host-synchronized)
  int prefill_steps = 0;        // steps that prefilled the context (--dcp-prefill-chunk)
  double prefill_ms = 0;        // their total wall time (slowest rank per step)
  double median_step_ms = 0;
  bool verified = false;
  double worst_rel_l2 = 0;  // over every step and rank, against the single-rank run
  double bound = 0;         // the activation dtype's bound
  bool passed = true;
  int worst_step = -1, worst_rank = -1;  // steps counted prefill steps first
};

// Parses --dcp-combine: "ag-rs" or "all-to-all".
DcpCombineMethod parse_dcp_combine(const std::string& text);
const char* dcp_combine_name(DcpCombineMethod method);

// Runs the steps; throws CliError for a machine that cannot host the ranks.
DcpRunReport run_dcp_decode(const LayerSetup& layer, const DcpRunOptions& options);

void print_dcp_report(const LayerSetup& layer, const DcpRunOptions& options, const DcpRunReport& report);
nlohmann::ordered_json dcp_report_json(const LayerSetup& layer, const DcpRunOptions& options,
                                       const DcpRunReport& report);

}  // namespace lattn::cli
