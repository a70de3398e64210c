// The continuous-batching scheduler (see scheduler.h for the policy).
#include "serving/scheduler.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <unordered_set>

namespace lattn::serving {

void SchedulerConfig::validate() const {
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw std::invalid_argument(message);
  };
  require(max_num_batched_tokens >= 1,
          "max_num_batched_tokens must be at least 1, got " + std::to_string(max_num_batched_tokens));
  require(max_num_seqs >= 1, "max_num_seqs must be at least 1, got " + std::to_string(max_num_seqs));
  require(block_size >= 1, "the block size must be at least 1 token, got " + std::to_string(block_size));
  require(num_blocks >= 1, "the cache needs at least 1 block, got " + std::to_string(num_blocks));
}

const char* row_kind_name(RowKind kind) {
  switch (kind) {
    case RowKind::decode:
      return "decode";
    case RowKind::prefill:
      return "prefill";
    case RowKind::prefill_with_context:
      return "prefill_with_context";
  }
  return "?";
}

namespace {
const SchedulerConfig& validated(const SchedulerConfig& config) {
  config.validate();
  return config;
}
}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(validated(config)), allocator_(config.num_blocks, config.shuffle_seed) {}

void Scheduler::add_request(const Request& request) {
  if (request.prompt_len < 1 || request.output_len < 1) {
    throw std::invalid_argument("request " + std::to_string(request.id) +
                                " needs a prompt and an output of at least 1 token each");
  }
  if (states_.count(request.id)) {
    throw std::invalid_argument("request " + std::to_string(request.id) + " was added twice");
  }
  // The longest sequence the request ever holds: prompt + all outputs but the last.
  const int64_t max_positions = int64_t(request.prompt_len) + request.output_len - 1;
  // Token counts are 32-bit in the metadata (seq_lens, num_computed_tokens).
  if (max_positions + 1 > std::numeric_limits<int32_t>::max()) {
    throw std::invalid_argument("request " + std::to_string(request.id) + " (prompt " +
                                std::to_string(request.prompt_len) + " + output " + std::to_string(request.output_len) +
                                " tokens) is longer than the " + std::to_string(std::numeric_limits<int32_t>::max()) +
                                " tokens one sequence may hold (token counts are 32-bit)");
  }
  const int64_t needed = blocks_for_tokens(max_positions, config_.block_size);
  if (needed > config_.num_blocks) {
    throw std::invalid_argument("request " + std::to_string(request.id) + " (prompt " +
                                std::to_string(request.prompt_len) + " + output " + std::to_string(request.output_len) +
                                " tokens) needs " + std::to_string(needed) + " blocks of " +
                                std::to_string(config_.block_size) + " tokens, but the cache has only " +
                                std::to_string(config_.num_blocks) + " blocks; raise --num-blocks");
  }
  RequestState state;
  state.request = request;
  states_.emplace(request.id, std::move(state));
  waiting_.push_back(request.id);
}

const RequestState& Scheduler::request(int64_t id) const {
  const auto it = states_.find(id);
  if (it == states_.end()) throw std::out_of_range("no request " + std::to_string(id));
  return it->second;
}

int64_t Scheduler::cached_tokens() const {
  int64_t tokens = 0;
  for (const int64_t id : running_) tokens += states_.at(id).num_computed_tokens;
  return tokens;
}

bool Scheduler::ensure_blocks(RequestState& state, int32_t tokens) {
  const int64_t missing = blocks_for_tokens(tokens, config_.block_size) - int64_t(state.blocks.size());
  if (missing <= 0) return true;
  auto blocks = allocator_.allocate(int32_t(missing));
  if (!blocks) return false;
  state.blocks.insert(state.blocks.end(), blocks->begin(), blocks->end());
  return true;
}

void Scheduler::preempt(int64_t id) {
  RequestState& state = states_.at(id);
  allocator_.free(state.blocks);
  state.blocks.clear();
  state.num_computed_tokens = 0;  // recompute prompt + generated tokens later
  state.status = RequestStatus::waiting;
  ++state.num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
}

ScheduledRow Scheduler::make_row(const RequestState& state, int32_t query_len) const {
  ScheduledRow row;
  row.request_id = state.request.id;
  row.query_len = query_len;
  row.num_computed_tokens = state.num_computed_tokens;
  row.block_table = state.blocks;
  if (query_len == 1) {
    row.kind = RowKind::decode;
  } else {
    row.kind = state.num_computed_tokens == 0 ? RowKind::prefill : RowKind::prefill_with_context;
  }
  return row;
}

ScheduledBatch Scheduler::schedule() {
  ScheduledBatch batch;
  int32_t budget = config_.max_num_batched_tokens;
  std::vector<ScheduledRow> decode_rows, prefill_rows;
  std::unordered_set<int64_t> scheduled;

  auto add_row = [&](const RequestState& state, int32_t query_len) {
    ScheduledRow row = make_row(state, query_len);
    (row.kind == RowKind::decode ? decode_rows : prefill_rows).push_back(std::move(row));
    scheduled.insert(state.request.id);
    budget -= query_len;
  };
  // The latest-admitted running request, other than `current`, that is not
  // scheduled this step (scheduled decodes are never taken back).
  auto pick_victim = [&](int64_t current) -> std::optional<int64_t> {
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      if (*it != current && !scheduled.count(*it)) return *it;
    }
    return std::nullopt;
  };
  // Schedules query_len tokens of a running request, preempting others for
  // blocks if needed; false when the request had to preempt itself.
  auto schedule_running = [&](RequestState& state, int32_t query_len) {
    while (!ensure_blocks(state, state.num_computed_tokens + query_len)) {
      const std::optional<int64_t> victim = pick_victim(state.request.id);
      const int64_t preempted = victim ? *victim : state.request.id;
      preempt(preempted);
      batch.preempted.push_back(preempted);
      if (!victim) return false;
    }
    add_row(state, query_len);
    return true;
  };

  // 1 and 2: running decodes first, then running prefills (next chunk).
  for (const bool decode_pass : {true, false}) {
    const std::vector<int64_t> snapshot = running_;  // preemption edits running_
    for (const int64_t id : snapshot) {
      RequestState& state = states_.at(id);
      if (state.status != RequestStatus::running || scheduled.count(id)) continue;
      const int32_t to_compute = state.tokens_to_compute();
      if ((to_compute == 1) != decode_pass) continue;
      if (budget == 0 || int32_t(scheduled.size()) >= config_.max_num_seqs) break;
      schedule_running(state, std::min(to_compute, budget));
    }
  }

  // 3: admit waiting requests, FCFS (not in a step that had to preempt: the
  // blocks just freed are what the preempted requests need back).
  if (batch.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 && int32_t(running_.size()) < config_.max_num_seqs) {
      RequestState& state = states_.at(waiting_.front());
      const int32_t query_len = std::min(state.tokens_to_compute(), budget);
      if (!ensure_blocks(state, query_len)) {
        ++state.num_steps_blocked;
        batch.num_blocked = int32_t(waiting_.size());
        break;
      }
      waiting_.pop_front();
      state.status = RequestStatus::running;
      running_.push_back(state.request.id);
      add_row(state, query_len);
    }
  }

  batch.num_decodes = int32_t(decode_rows.size());
  for (const ScheduledRow& row : decode_rows) batch.num_decode_tokens += row.query_len;
  for (const ScheduledRow& row : prefill_rows) batch.num_prefill_tokens += row.query_len;
  batch.rows = std::move(decode_rows);
  batch.rows.insert(batch.rows.end(), std::make_move_iterator(prefill_rows.begin()),
                    std::make_move_iterator(prefill_rows.end()));
  return batch;
}

std::vector<int64_t> Scheduler::on_step_done(const ScheduledBatch& batch, double now_s) {
  // Check the whole batch against the current state before changing anything.
  for (const ScheduledRow& row : batch.rows) {
    const RequestState& state = request(row.request_id);
    if (state.status != RequestStatus::running || state.num_computed_tokens != row.num_computed_tokens ||
        row.query_len > state.tokens_to_compute()) {
      throw std::logic_error("step result for request " + std::to_string(row.request_id) +
                             " does not match the scheduler's state (was the batch scheduled twice?)");
    }
  }
  std::vector<int64_t> finished;
  for (const ScheduledRow& row : batch.rows) {
    RequestState& state = states_.at(row.request_id);
    state.num_computed_tokens += row.query_len;
    if (state.num_computed_tokens < state.known_tokens()) continue;  // a prefill chunk short of the end
    ++state.num_generated;  // the step computed every known token: one more is sampled
    if (state.first_token_s < 0) state.first_token_s = now_s;
    if (state.num_generated < state.request.output_len) continue;
    state.finish_s = now_s;
    state.status = RequestStatus::finished;
    allocator_.free(state.blocks);
    state.blocks.clear();
    running_.erase(std::find(running_.begin(), running_.end(), row.request_id));
    ++num_finished_;
    finished.push_back(row.request_id);
  }
  return finished;
}

}  // namespace lattn::serving
