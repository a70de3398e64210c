// tools/serving/verify.h — `lattn run --verify`: record what the serving run
// produced for a sample of requests, then re-compute those requests with the
// `reference` backend (plain loops, fp64 accumulation) and compare.
//
// The re-computation replays each sampled request alone, step by step as the
// run scheduled it (the same chunks with the same context, the same decode
// steps, the same cache dtype), into a private cache with a contiguous block
// table and a NaN-poisoned remainder. So the comparison isolates the fast
// backends' arithmetic — and catches anything the batching got wrong: rows
// of another request, a wrong block table, a missed cache write, the
// decodes-first ordering.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lattn/config.h"
#include "lattn/dtype.h"
#include "lattn/tensor.h"
#include "serving/model.h"
#include "serving/scheduler.h"
#include "serving/trace.h"

namespace lattn::serving {

struct VerifyConfig {
  MlaDims dims;
  int num_layers = 1;
  DType dtype = DType::bf16;
  DType kv_cache_dtype = DType::bf16;
  float kv_cache_scale = 1.0f;
  int32_t block_size = 16;
  int64_t context_chunk_workspace_size = 0;  // the run's, so context is chunked the same way
  uint64_t seed = 0;                         // the run's (weights and activations)
  IndexerShape indexer;                      // a sparse model's (replayed with the reference indexer)
};

// Relative L2 error bound of an output in `dtype` against the fp64 reference
// (the team's error model: bf16 1e-2, fp16 2e-3, fp32 1e-5).
double verify_bound(DType dtype);

struct VerifiedRequest {
  int64_t id = 0;
  int32_t prompt_len = 0, output_len = 0;
  int32_t positions = 0;  // outputs compared per layer
  int32_t decode_steps = 0, prefill_chunks = 0, chunks_with_context = 0;
  double worst_rel_l2 = 0;  // over layers: ||run - ref|| / ||ref||
  int worst_layer = 0;
  bool finite = true;    // no NaN/inf in the run's outputs
  bool complete = true;  // the run produced every position (prompt + output - 1)
};

struct VerifyReport {
  std::vector<VerifiedRequest> requests;
  double worst_rel_l2 = 0;
  int64_t worst_request = -1;
  int worst_layer = 0;
  double bound = 0;
  bool passed = true;
  double seconds = 0;  // time the reference re-computation took
};

// Which requests to verify (count of them, in trace order): the shortest
// prompt longer than the token budget (its prefill is chunked, with
// context), the shortest request that decodes, then requests spread evenly
// over the trace.
std::vector<Request> pick_verify_requests(const std::vector<Request>& trace, int count, int32_t max_num_batched_tokens);

class OutputRecorder {
 public:
  OutputRecorder(const VerifyConfig& config, const std::vector<Request>& sampled);

  bool records(int64_t request_id) const { return requests_.count(request_id) != 0; }
  // A row of a step ran on `layer`: its output rows [query_len, N*V] (any
  // device, contiguous, the activation dtype). Layer 0 also logs the step.
  void record(int layer, const ScheduledRow& row, const Tensor& out_rows);

  // Replays every sampled request with the reference backend and compares.
  VerifyReport verify() const;

 private:
  struct Step {
    int32_t query_len, num_computed_tokens;
  };
  struct Recorded {
    Request request;
    std::vector<Step> steps;  // since the last (re)start from position 0
    OwnedTensor outputs;      // [num_layers, prompt_len + output_len - 1, N*V], the activation dtype
  };
  VerifiedRequest replay(const Recorded& recorded) const;

  VerifyConfig config_;
  std::map<int64_t, Recorded> requests_;
};

}  // namespace lattn::serving
