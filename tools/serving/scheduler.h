// tools/serving/scheduler.h — a continuous-batching scheduler in the manner
// of vLLM v1: one token budget per step shared by decodes and (chunked)
// prefills, decodes first.
//
// Each step:
//  1. running requests that decode (one new token each) are scheduled first,
//     in admission order, while the token budget and max_num_seqs allow;
//  2. running requests still prefilling get the next chunk of their prompt
//     (as much as the remaining budget holds: chunked prefill);
//  3. waiting requests are admitted first-come first-served while the budget,
//     max_num_seqs and the free blocks allow; a request that cannot get the
//     blocks for its first chunk waits (and the ones behind it, FCFS);
//  4. when a running request needs a new block and none is free, the most
//     recently admitted running request not yet scheduled this step is
//     preempted: its blocks are freed and it goes back to the front of the
//     queue, to recompute its prompt and the tokens it generated (vLLM's
//     recompute preemption). Nothing is lost; it just runs again later.
// The batch handed to the metadata builder is ordered DECODES FIRST, THEN
// PREFILLS, and every row carries its block table.
//
// Token accounting of a request with prompt P and output O: prefill computes
// positions [0, P) (in one or more chunks); the step that completes them
// samples the first output token; each decode step then computes one position
// and samples the next token. After O tokens the request finishes, having
// computed P + O - 1 positions.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "serving/block_allocator.h"
#include "serving/trace.h"

namespace lattn::serving {

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 512;  // token budget per step (decode + prefill tokens)
  int32_t max_num_seqs = 32;             // requests running at once (and rows per step)
  int32_t block_size = 16;               // tokens per cache block
  int32_t num_blocks = 512;              // blocks in each layer's cache
  std::optional<uint64_t> shuffle_seed;  // scatter block ids (see BlockAllocator)

  // Throws std::invalid_argument with a sentence naming the bad field.
  void validate() const;
};

// How a row attends, by what the metadata builder will make of it.
enum class RowKind {
  decode,                // query_len == 1 (the builder's reorder threshold): absorbed path over the cache
  prefill,               // query_len > 1, no context: causal attention among the new tokens only
  prefill_with_context,  // query_len > 1 after earlier chunks: new tokens + chunked context from the cache
};
const char* row_kind_name(RowKind kind);

struct ScheduledRow {
  int64_t request_id = 0;
  int32_t query_len = 0;             // new tokens this step
  int32_t num_computed_tokens = 0;   // context already in the cache
  std::vector<int32_t> block_table;  // covers num_computed_tokens + query_len positions
  RowKind kind = RowKind::decode;
  int32_t seq_len() const { return num_computed_tokens + query_len; }
};

struct ScheduledBatch {
  std::vector<ScheduledRow> rows;  // decodes first, then prefills
  int32_t num_decodes = 0;
  int32_t num_decode_tokens = 0;
  int32_t num_prefill_tokens = 0;
  std::vector<int64_t> preempted;  // requests preempted while this step was scheduled
  int32_t num_blocked = 0;         // waiting requests that could not get blocks this step
  int32_t total_tokens() const { return num_decode_tokens + num_prefill_tokens; }
  bool empty() const { return rows.empty(); }
};

enum class RequestStatus { waiting, running, finished };

struct RequestState {
  Request request;
  RequestStatus status = RequestStatus::waiting;
  int32_t num_computed_tokens = 0;  // positions written to the cache
  int32_t num_generated = 0;        // output tokens sampled so far
  std::vector<int32_t> blocks;      // block table (running requests only)
  int32_t num_preemptions = 0;
  int32_t num_steps_blocked = 0;  // steps spent at the head of the queue without blocks
  double first_token_s = -1;      // engine clock when the first output token was sampled
  double finish_s = -1;           // engine clock when the last token was sampled

  // Tokens whose keys must be in the cache before the next token can be sampled.
  int32_t known_tokens() const { return request.prompt_len + num_generated; }
  int32_t tokens_to_compute() const { return known_tokens() - num_computed_tokens; }
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  // Queues a request (it has arrived). Throws std::invalid_argument when the
  // request could never run: it needs more blocks than the cache holds.
  void add_request(const Request& request);

  // Plans the next step. Empty when nothing is waiting or running.
  ScheduledBatch schedule();

  // Accounts a step that ran: advances every row's request, samples tokens,
  // finishes requests (freeing their blocks). `now_s` is the engine clock at
  // the end of the step. Returns the ids of the requests that finished.
  std::vector<int64_t> on_step_done(const ScheduledBatch& batch, double now_s);

  const SchedulerConfig& config() const { return config_; }
  const BlockAllocator& allocator() const { return allocator_; }
  const RequestState& request(int64_t id) const;
  const std::unordered_map<int64_t, RequestState>& requests() const { return states_; }
  // Ids of the running requests (admission order) and of the waiting queue
  // (for invariant checks that must not scan every finished request).
  const std::vector<int64_t>& running_ids() const { return running_; }
  const std::deque<int64_t>& waiting_ids() const { return waiting_; }
  int32_t num_waiting() const { return int32_t(waiting_.size()); }
  int32_t num_running() const { return int32_t(running_.size()); }
  int32_t num_finished() const { return num_finished_; }
  int64_t num_preemptions() const { return num_preemptions_; }
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  // Tokens held in the cache by running requests (for utilisation).
  int64_t cached_tokens() const;

 private:
  // Grows `state`'s block table to cover `tokens` positions; false (and no
  // change) when the free blocks do not suffice.
  bool ensure_blocks(RequestState& state, int32_t tokens);
  void preempt(int64_t id);
  ScheduledRow make_row(const RequestState& state, int32_t query_len) const;

  SchedulerConfig config_;
  BlockAllocator allocator_;
  std::unordered_map<int64_t, RequestState> states_;
  std::deque<int64_t> waiting_;   // FCFS; preempted requests go back to the front
  std::vector<int64_t> running_;  // admission order
  int32_t num_finished_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace lattn::serving
