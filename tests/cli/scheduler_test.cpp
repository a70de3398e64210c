// The continuous-batching scheduler: token budget, max_num_seqs, chunked
// prefill, decodes first, block waits and recompute preemption — checked on
// hand-made cases and, for invariants, on random workloads run to the end.
#include "serving/scheduler.h"

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "serving/random.h"

namespace lattn::serving {
namespace {

Request make_request(int64_t id, int32_t prompt, int32_t output) {
  Request r;
  r.id = id;
  r.prompt_len = prompt;
  r.output_len = output;
  return r;
}

SchedulerConfig make_config(int32_t budget, int32_t max_seqs, int32_t block_size, int32_t num_blocks) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  return c;
}

// Checks what every scheduled batch must satisfy, whatever the workload.
void check_batch_invariants(const Scheduler& scheduler, const ScheduledBatch& batch) {
  const SchedulerConfig& c = scheduler.config();
  ASSERT_LE(batch.total_tokens(), c.max_num_batched_tokens);
  ASSERT_LE(int32_t(batch.rows.size()), c.max_num_seqs);
  int32_t decode_tokens = 0, prefill_tokens = 0;
  std::set<int64_t> ids;
  std::set<int32_t> blocks;
  for (size_t i = 0; i < batch.rows.size(); ++i) {
    const ScheduledRow& row = batch.rows[i];
    const bool is_decode_row = int32_t(i) < batch.num_decodes;
    ASSERT_EQ(row.kind == RowKind::decode, is_decode_row) << "row " << i << ": decodes must come first";
    ASSERT_EQ(row.kind == RowKind::decode, row.query_len == 1);
    if (row.kind == RowKind::prefill) {
      ASSERT_EQ(row.num_computed_tokens, 0);
    }
    if (row.kind == RowKind::prefill_with_context) {
      ASSERT_GT(row.num_computed_tokens, 0);
    }
    (is_decode_row ? decode_tokens : prefill_tokens) += row.query_len;
    ASSERT_TRUE(ids.insert(row.request_id).second) << "request scheduled twice in one step";
    ASSERT_EQ(int32_t(row.block_table.size()), blocks_for_tokens(row.seq_len(), c.block_size));
    for (const int32_t b : row.block_table) {
      ASSERT_TRUE(scheduler.allocator().is_allocated(b));
      ASSERT_TRUE(blocks.insert(b).second) << "block " << b << " belongs to two requests";
    }
    const RequestState& state = scheduler.request(row.request_id);
    ASSERT_EQ(state.status, RequestStatus::running);
    ASSERT_EQ(state.num_computed_tokens, row.num_computed_tokens);
    ASSERT_LE(row.query_len, state.tokens_to_compute());
  }
  ASSERT_EQ(decode_tokens, batch.num_decode_tokens);
  ASSERT_EQ(prefill_tokens, batch.num_prefill_tokens);
}

struct RunTotals {
  int steps = 0;
  std::map<int64_t, int64_t> tokens_computed;  // per request, recomputation included
  int64_t chunked_prefill_rows = 0;            // rows of kind prefill_with_context
};

// Adds every request at t = 0 and runs the scheduler until all finish.
RunTotals run_to_completion(Scheduler& scheduler, const std::vector<Request>& requests, int max_steps = 100000) {
  RunTotals totals;
  for (const Request& r : requests) scheduler.add_request(r);
  while (scheduler.has_unfinished()) {
    const ScheduledBatch batch = scheduler.schedule();
    check_batch_invariants(scheduler, batch);
    if (::testing::Test::HasFatalFailure()) return totals;
    EXPECT_FALSE(batch.empty()) << "work is pending but nothing was scheduled (livelock)";
    if (batch.empty()) return totals;
    for (const ScheduledRow& row : batch.rows) {
      totals.tokens_computed[row.request_id] += row.query_len;
      totals.chunked_prefill_rows += row.kind == RowKind::prefill_with_context;
    }
    scheduler.on_step_done(batch, double(++totals.steps));
    EXPECT_LT(totals.steps, max_steps);
    if (totals.steps >= max_steps) return totals;
  }
  return totals;
}

TEST(Scheduler, ChunksALongPromptThenDecodes) {
  Scheduler scheduler(make_config(/*budget=*/4, 8, /*block_size=*/4, 16));
  scheduler.add_request(make_request(0, /*prompt=*/10, /*output=*/3));
  struct Expect {
    RowKind kind;
    int32_t query_len, computed;
  };
  const std::vector<Expect> expected = {{RowKind::prefill, 4, 0},
                                        {RowKind::prefill_with_context, 4, 4},
                                        {RowKind::prefill_with_context, 2, 8},  // completes the prompt: token 1
                                        {RowKind::decode, 1, 10},               // token 2
                                        {RowKind::decode, 1, 11}};              // token 3: done
  for (size_t step = 0; step < expected.size(); ++step) {
    const ScheduledBatch batch = scheduler.schedule();
    ASSERT_EQ(batch.rows.size(), 1u) << "step " << step;
    EXPECT_EQ(batch.rows[0].kind, expected[step].kind) << "step " << step;
    EXPECT_EQ(batch.rows[0].query_len, expected[step].query_len) << "step " << step;
    EXPECT_EQ(batch.rows[0].num_computed_tokens, expected[step].computed) << "step " << step;
    const auto finished = scheduler.on_step_done(batch, double(step + 1));
    EXPECT_EQ(finished.size(), step + 1 == expected.size() ? 1u : 0u);
  }
  const RequestState& state = scheduler.request(0);
  EXPECT_EQ(state.status, RequestStatus::finished);
  EXPECT_EQ(state.num_generated, 3);
  EXPECT_EQ(state.first_token_s, 3.0);
  EXPECT_EQ(state.finish_s, 5.0);
  EXPECT_EQ(scheduler.allocator().num_used(), 0);
  EXPECT_TRUE(scheduler.schedule().empty());
}

TEST(Scheduler, DecodesComeFirstAndGetTheBudgetFirst) {
  Scheduler scheduler(make_config(/*budget=*/8, 8, 4, 64));
  scheduler.add_request(make_request(0, 3, 10));
  scheduler.add_request(make_request(1, 4, 10));
  scheduler.on_step_done(scheduler.schedule(), 1.0);  // both prefill whole: now both decode
  scheduler.add_request(make_request(2, 100, 2));     // a long prompt arrives
  const ScheduledBatch batch = scheduler.schedule();
  ASSERT_EQ(batch.rows.size(), 3u);
  EXPECT_EQ(batch.num_decodes, 2);
  EXPECT_EQ(batch.rows[0].request_id, 0);
  EXPECT_EQ(batch.rows[1].request_id, 1);
  EXPECT_EQ(batch.rows[2].request_id, 2);
  EXPECT_EQ(batch.rows[2].kind, RowKind::prefill);
  EXPECT_EQ(batch.rows[2].query_len, 6);  // what the two decodes left of the budget
  EXPECT_EQ(batch.num_decode_tokens, 2);
  EXPECT_EQ(batch.num_prefill_tokens, 6);
}

TEST(Scheduler, RespectsMaxNumSeqs) {
  Scheduler scheduler(make_config(1000, /*max_seqs=*/2, 16, 64));
  for (int i = 0; i < 5; ++i) scheduler.add_request(make_request(i, 8, 4));
  const ScheduledBatch batch = scheduler.schedule();
  EXPECT_EQ(batch.rows.size(), 2u);
  EXPECT_EQ(scheduler.num_running(), 2);
  EXPECT_EQ(scheduler.num_waiting(), 3);
  EXPECT_EQ(batch.num_blocked, 0);  // waiting for a seat, not for blocks
}

TEST(Scheduler, ARequestThatCannotGetBlocksWaitsAndRunsLater) {
  // 4 blocks of 4 tokens. Request 0 takes all 4; request 1 must wait.
  Scheduler scheduler(make_config(32, 8, 4, 4));
  scheduler.add_request(make_request(0, 16, 1));
  scheduler.add_request(make_request(1, 4, 2));
  ScheduledBatch first = scheduler.schedule();
  ASSERT_EQ(first.rows.size(), 1u);
  EXPECT_EQ(first.rows[0].request_id, 0);
  EXPECT_EQ(first.num_blocked, 1);
  EXPECT_EQ(scheduler.request(1).num_steps_blocked, 1);
  EXPECT_EQ(scheduler.allocator().num_free(), 0);
  scheduler.on_step_done(first, 1.0);  // request 0 finishes (1 output token) and frees its blocks
  EXPECT_EQ(scheduler.allocator().num_free(), 4);
  ScheduledBatch second = scheduler.schedule();
  ASSERT_EQ(second.rows.size(), 1u);
  EXPECT_EQ(second.rows[0].request_id, 1);
  EXPECT_EQ(second.num_blocked, 0);
}

TEST(Scheduler, PreemptsTheLatestRequestWhenADecodeNeedsABlockAndRecomputesIt) {
  // 3 blocks of 2 tokens; two requests of prompt 2 fill 2 blocks, then each
  // decode step needs another block: the later one is preempted.
  Scheduler scheduler(make_config(16, 8, 2, 3));
  scheduler.add_request(make_request(0, 2, 4));
  scheduler.add_request(make_request(1, 2, 4));
  const RunTotals totals = run_to_completion(scheduler, {});
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_GT(scheduler.num_preemptions(), 0);
  EXPECT_GT(scheduler.request(1).num_preemptions, 0);
  EXPECT_EQ(scheduler.request(0).num_preemptions, 0);  // the earlier request keeps its blocks
  EXPECT_EQ(scheduler.num_finished(), 2);
  for (int64_t id : {0, 1}) EXPECT_EQ(scheduler.request(id).num_generated, 4);
  // Request 0 computed exactly its P + O - 1 positions; request 1 more (recompute).
  EXPECT_EQ(totals.tokens_computed.at(0), 2 + 4 - 1);
  EXPECT_GT(totals.tokens_computed.at(1), 2 + 4 - 1);
  EXPECT_EQ(scheduler.allocator().num_used(), 0);
}

TEST(Scheduler, RefusesARequestLargerThanTheCache) {
  Scheduler scheduler(make_config(16, 8, 16, 4));
  try {
    scheduler.add_request(make_request(7, 60, 10));  // 69 positions = 5 blocks > 4
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "request 7 (prompt 60 + output 10 tokens) needs 5 blocks of 16 tokens, but the cache has only 4 blocks; "
              "raise --num-blocks");
  }
  scheduler.add_request(make_request(8, 60, 5));  // 64 positions = 4 blocks: fits exactly
  EXPECT_THROW(scheduler.add_request(make_request(8, 1, 1)), std::invalid_argument);  // same id twice
}

TEST(Scheduler, RejectsAStepResultThatDoesNotMatch) {
  Scheduler scheduler(make_config(16, 8, 4, 16));
  scheduler.add_request(make_request(0, 8, 2));
  const ScheduledBatch batch = scheduler.schedule();
  scheduler.on_step_done(batch, 1.0);
  EXPECT_THROW(scheduler.on_step_done(batch, 2.0), std::logic_error);
}

TEST(Scheduler, InvalidConfigsAreRefusedWithTheirName) {
  EXPECT_THROW(Scheduler(make_config(0, 8, 4, 16)), std::invalid_argument);
  EXPECT_THROW(Scheduler(make_config(8, 0, 4, 16)), std::invalid_argument);
  EXPECT_THROW(Scheduler(make_config(8, 8, 0, 16)), std::invalid_argument);
  EXPECT_THROW(Scheduler(make_config(8, 8, 4, 0)), std::invalid_argument);
}

// Random workloads under tight budgets and caches: every invariant holds at
// every step, everything finishes, every block comes back, and a request
// never preempted computed exactly its P + O - 1 positions.
TEST(Scheduler, RandomWorkloadsFinishEveryRequestAndReturnEveryBlock) {
  Rng rng(2024);
  int64_t preemptions = 0, chunked_steps = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SchedulerConfig config = make_config(int32_t(1 + rng.next_u64() % 64), int32_t(1 + rng.next_u64() % 8),
                                         int32_t(1 + rng.next_u64() % 16), 1);
    const int num_requests = int(1 + rng.next_u64() % 12);
    std::vector<Request> requests;
    int32_t largest_blocks = 1;
    for (int i = 0; i < num_requests; ++i) {
      requests.push_back(make_request(i, int32_t(1 + rng.next_u64() % 80), int32_t(1 + rng.next_u64() % 20)));
      largest_blocks = std::max(
          largest_blocks,
          int32_t(blocks_for_tokens(requests.back().prompt_len + requests.back().output_len - 1, config.block_size)));
    }
    config.num_blocks = largest_blocks + int32_t(rng.next_u64() % 8);  // from barely enough to roomy
    config.shuffle_seed = rng.next_u64();
    Scheduler scheduler(config);
    SCOPED_TRACE("trial " + std::to_string(trial));
    const RunTotals totals = run_to_completion(scheduler, requests);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_EQ(scheduler.num_finished(), num_requests);
    EXPECT_EQ(scheduler.allocator().num_used(), 0);
    preemptions += scheduler.num_preemptions();
    chunked_steps += totals.chunked_prefill_rows;
    for (const Request& r : requests) {
      const RequestState& state = scheduler.request(r.id);
      EXPECT_EQ(state.num_generated, r.output_len);
      if (state.num_preemptions == 0) {
        EXPECT_EQ(totals.tokens_computed.at(r.id), r.prompt_len + r.output_len - 1);
      }
    }
  }
  // The workloads are tight enough to exercise what they are meant to.
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(chunked_steps, 0);
}

}  // namespace
}  // namespace lattn::serving
