// A soak test of the serving loop behind `lattn run`: many scheduler steps
// with random (Poisson) arrivals, prompt and output lengths, on a cache small
// enough that requests wait for blocks and get preempted all the time. After
// EVERY step the block ownership is checked (no block lost, none owned twice,
// none owned by a request that is not running, every running request's table
// covers its computed tokens); at the end a sample of finished requests is
// re-computed with the reference backend (fp64) and compared.
//
// The step count is LATTN_SOAK_STEPS (default 3000, about a second on one
// thread: CI); the long run recorded in docs/reliability.md sets it to 100000.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_set>
#include <vector>

#include "serving/engine.h"

namespace lattn::serving {
namespace {

int64_t soak_steps() {
  const char* env = std::getenv("LATTN_SOAK_STEPS");
  return env ? std::max<int64_t>(1, std::atoll(env)) : 3000;
}

// Every block id is owned by at most one running request, the allocator's
// count of used blocks equals what running requests hold (so no finished or
// preempted request keeps one), and waiting requests hold none. Costs
// O(running + waiting), not O(all requests): it runs after every step.
// Returns "" or the first violation.
std::string ownership_violation(const Scheduler& s) {
  const BlockAllocator& a = s.allocator();
  for (const int64_t id : s.waiting_ids()) {
    const RequestState& state = s.request(id);
    if (state.status != RequestStatus::waiting) return "request " + std::to_string(id) + " is queued but not waiting";
    if (!state.blocks.empty()) return "waiting request " + std::to_string(id) + " holds blocks";
  }
  std::unordered_set<int32_t> owned;
  int64_t held = 0;
  for (const int64_t id : s.running_ids()) {
    const RequestState& state = s.request(id);
    if (state.status != RequestStatus::running)
      return "request " + std::to_string(id) + " is listed running but is not";
    if (int64_t(state.blocks.size()) < blocks_for_tokens(state.num_computed_tokens, s.config().block_size)) {
      return "request " + std::to_string(id) + " has fewer blocks than its computed tokens need";
    }
    for (const int32_t b : state.blocks) {
      if (b < 0 || b >= a.num_blocks()) return "block id " + std::to_string(b) + " out of range";
      if (!a.is_allocated(b)) return "block " + std::to_string(b) + " is owned but free in the allocator";
      if (!owned.insert(b).second) return "block " + std::to_string(b) + " is owned twice";
    }
    held += int64_t(state.blocks.size());
  }
  if (held != a.num_used()) {
    return "running requests hold " + std::to_string(held) + " blocks, the allocator counts " +
           std::to_string(a.num_used()) + " used (a block was lost)";
  }
  return "";
}

TEST(Soak, RandomArrivalsPreemptionsAndFreesKeepBlocksConsistent) {
  const int64_t target_steps = soak_steps();
  EngineConfig config;
  config.dims = MlaDims{2, 32, 16, 8, 16};  // small, not DeepSeek's
  config.num_layers = 1;
  config.dtype = DType::f32;
  config.kv_cache_dtype = DType::f16;
  config.scheduler.block_size = 4;
  config.scheduler.num_blocks = 24;  // 96 tokens: requests wait and get preempted
  config.scheduler.max_num_seqs = 6;
  config.scheduler.max_num_batched_tokens = 24;
  config.scheduler.shuffle_seed = 7;
  config.seed = 11;
  config.verify_requests = 6;

  // About 3.8 steps per request with these shapes: enough requests for the target.
  TraceConfig trace_config;
  trace_config.seed = 5;
  trace_config.num_requests = int(std::max<int64_t>(8, target_steps / 3));
  trace_config.request_rate = 4000;  // per second of engine time: bursts and idle gaps
  trace_config.prompt_len_median = 10;
  trace_config.prompt_len_sigma = 0.9;
  trace_config.max_prompt_len = 60;
  trace_config.output_len_mean = 12;
  trace_config.max_output_len = 30;
  const std::vector<Request> trace = generate_trace(trace_config);

  ServingEngine engine(config);
  int64_t steps = 0, preempted = 0, blocked = 0;
  std::string first_violation;
  const RunReport report = engine.run(trace, [&](const StepStats& step, const Scheduler& s) {
    ++steps;
    preempted += step.preempted;
    blocked += step.blocked > 0;
    if (first_violation.empty()) {
      const std::string v = ownership_violation(s);
      if (!v.empty()) first_violation = "after step " + std::to_string(step.index) + ": " + v;
    }
  });

  EXPECT_EQ(first_violation, "");
  EXPECT_EQ(report.num_finished, int64_t(trace.size()));
  EXPECT_GE(steps, target_steps * 8 / 10) << "the trace was too short for the target";
  EXPECT_GT(preempted, 0) << "the cache never ran out: the test exercised no preemption";
  EXPECT_GT(blocked, 0) << "no request ever waited for blocks";
  ASSERT_TRUE(report.verify.has_value());
  EXPECT_TRUE(report.verify->passed) << "worst relative error " << report.verify->worst_rel_l2 << " (request "
                                     << report.verify->worst_request << ")";
  std::printf(
      "soak: %lld steps, %lld requests, %lld preemptions, %lld steps with blocked requests, "
      "%zu verified requests (worst rel. error %.2e)\n",
      (long long)steps, (long long)trace.size(), (long long)preempted, (long long)blocked,
      report.verify->requests.size(), report.verify->worst_rel_l2);
}

}  // namespace
}  // namespace lattn::serving
