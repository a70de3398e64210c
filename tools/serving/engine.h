// tools/serving/engine.h — the serving loop behind `lattn run`.
//
// Requests arrive (engine clock), the scheduler plans each step, the block
// tables become MlaMetadata through MlaMetadataBuilder, and every layer runs
// MlaAttention::forward over its own paged latent cache with its own random
// kv_b_proj weight. The engine clock advances by each step's measured time
// (and jumps over idle gaps to the next arrival), so arrival rates and
// latencies are in the units a server would see on this machine.
#pragma once

#include <span>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lattn/config.h"
#include "lattn/device.h"
#include "lattn/dtype.h"
#include "lattn/metadata.h"
#include "serving/model.h"
#include "serving/scheduler.h"
#include "serving/trace.h"
#include "serving/verify.h"

namespace lattn::serving {

struct EngineConfig {
  MlaDims dims;                        // one tensor-parallel rank's
  int num_layers = 2;                  // each with its own cache and weights
  DType dtype = DType::bf16;           // activations
  DType kv_cache_dtype = DType::bf16;  // bf16, f16, fp8_e4m3
  float kv_cache_scale = 1.0f;         // fp8 only (vLLM's default k_scale)
  Device device = Device::cpu();
  std::string prefill_backend;  // "" = the selector's choice
  std::string decode_backend;
  // A sparse model (indexer.index_topk > 0): every layer runs its lightning
  // indexer and sparse attention (docs/sparse.md); the two names below then
  // replace the dense backends ("" = the selectors' choice).
  IndexerShape indexer;
  std::string sparse_backend, indexer_backend;
  SchedulerConfig scheduler;  // budget, max_num_seqs, block size, blocks
  uint64_t seed = 0;          // weights and activations
  int verify_requests = 0;    // requests re-computed with `reference` (0: no --verify)
  // Called once before that re-computation starts (it can take tens of
  // seconds): the command prints a progress line. May be empty.
  std::function<void(int64_t requests)> on_verify_start;
  // false: the engine clock advances by each step's measured time. true: by
  // modelled_step_seconds() of the step, so a seed gives the same schedule,
  // latencies and summary on any machine (the layers still run).
  bool virtual_clock = false;
};

// The virtual clock's step time: a fixed overhead per step and per layer plus
// the step's attention and projection FLOPs at a nominal 0.25 TFLOP/s (seconds).
// A model for reproducibility, not a prediction of any machine.
double modelled_step_seconds(const MlaDims& dims, int num_layers, std::span<const RequestSpec> rows);

// One step, as the progress display and the report see it.
struct StepStats {
  int64_t index = 0;
  double end_s = 0;      // engine clock after the step
  double latency_s = 0;  // metadata build + every layer's forward
  int32_t decodes = 0;   // rows by kind
  int32_t prefills = 0;  // no context
  int32_t prefills_with_context = 0;
  int32_t decode_tokens = 0;
  int32_t prefill_tokens = 0;
  int32_t blocks_used = 0;                         // after scheduling (what the step ran with)
  int32_t waiting = 0, running = 0, finished = 0;  // after the step
  int32_t preempted = 0;                           // requests preempted while scheduling it
  int32_t blocked = 0;                             // waiting requests that could not get blocks
};

// Which backend ran and why.
struct BackendUse {
  std::string name;
  std::string why;
  int64_t steps = 0;  // steps in which it ran (had rows of its kind)
  // What ran inside it (the first layer's kernel_label() after each step it
  // ran in: a CUDA decode plan can change with the batch) and in how many
  // steps, in order of first use. Before the run: the label the layer gives
  // unplanned, with 0 steps.
  std::vector<std::pair<std::string, int64_t>> kernels;
  // The label that ran in the most steps (the first on a tie).
  const std::string& main_kernel() const;
};

struct RunReport {
  int64_t num_requests = 0;
  int64_t num_finished = 0;
  int64_t num_layers = 0;
  std::vector<StepStats> steps;
  int64_t prefill_tokens = 0;  // computed, recomputation included
  int64_t decode_tokens = 0;
  int64_t prefill_rows = 0, prefill_with_context_rows = 0, decode_rows = 0;
  double busy_s = 0;  // sum of step latencies
  double end_s = 0;   // engine clock at the end (busy + idle gaps)
  int32_t num_blocks = 0, block_size = 0;
  int32_t peak_blocks_used = 0;
  double mean_block_utilisation = 0;  // blocks in use / blocks, averaged over steps
  double mean_token_utilisation = 0;  // cached tokens / slots of the blocks in use, averaged over steps
  int64_t preemptions = 0;
  int64_t blocked_steps = 0;                  // steps where the queue head waited for blocks
  std::vector<double> time_to_first_token_s;  // per finished request (arrival to first token)
  std::vector<double> request_latency_s;      // per finished request (arrival to last token)
  BackendUse prefill_backend, decode_backend;
  std::optional<VerifyReport> verify;
};

class ServingEngine {
 public:
  // Builds the layers (weights, caches, backends). Throws what MlaAttention
  // throws for a configuration no backend can serve.
  explicit ServingEngine(const EngineConfig& config);
  ~ServingEngine();

  const EngineConfig& config() const;
  // The backends the layers run (known before the run) and why.
  BackendUse prefill_backend() const;
  BackendUse decode_backend() const;

  // Throws std::invalid_argument when a request can never fit the cache
  // (before any work is done).
  void check_trace(const std::vector<Request>& trace) const;

  // Serves the whole trace; on_step (may be empty) is called after every step.
  RunReport run(const std::vector<Request>& trace,
                const std::function<void(const StepStats&, const Scheduler&)>& on_step);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lattn::serving
