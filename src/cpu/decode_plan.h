// src/cpu/decode_plan.h — how the `cpu` decode backend cuts a batch into
// jobs (internal): one job = one request's query rows (all heads, all s_q
// tokens) against a contiguous range of its keys (a "split").
//
// A request's keys are split only when the batch alone cannot keep every
// thread busy: the target is kJobsPerThread jobs per thread (so that a late
// or slow thread leaves work the others can take), or one job per thread
// when that many would be shorter than kPreferredSplitKeys keys; no split is
// shorter than about kMinSplitKeys keys (each split costs a query packing, a
// partial result written by one core and read by another, and its share of
// the combine); cuts fall on key-tile multiples. Or, in the batch-invariant
// mode, every request is cut by its own length alone, whatever its batchmates
// and the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lattn::cpu {

// A split costs ~2.5 us of query packing and partial writes on one thread,
// and ~5 us more when its partial result is combined on the other core,
// against ~0.19 us per key at 16 heads (docs/cpu.md, "Split-KV"): two jobs
// per thread, not more (lattn's pool needs no spare jobs to absorb a late
// thread), and one of 512 keys per thread where a short batch allows only
// that. A request of under 2 * kMinSplitKeys keys is never split.
constexpr int kJobsPerThread = 2;
constexpr int kPreferredSplitKeys = 512;
constexpr int kMinSplitKeys = 256;
constexpr int kSplitAlign = 64;  // = the kernels' key tile
// Batch-invariant mode (docs/mla.md): a request's splits depend on its own
// length only, never on its batchmates or the thread count. From 1024 keys it
// is cut every kBatchInvariantSplitKeys keys from its first key; a request of
// 512-1023 keys, which that would leave in one job or cut into one long and
// one short piece, is cut into two even halves at the key tile nearest its
// middle (what the balanced plan does with a lone request on two or more
// threads); one of fewer keys is not split.
constexpr int kBatchInvariantSplitKeys = 512;

struct DecodeSplit {
  int request = 0;
  int key_begin = 0, key_end = 0;  // keys [key_begin, key_end) of the request
  size_t first_row = 0;            // first row of its partial results (rows = lanes of the request)
  friend bool operator==(const DecodeSplit&, const DecodeSplit&) = default;
};

struct DecodePlan {
  std::vector<int32_t> q_begin;       // [R + 1] query token offsets
  std::vector<int32_t> seq_lens;      // [R]
  std::vector<int> request_of_token;  // [T]
  std::vector<DecodeSplit> splits;    // grouped by request, in key order
  std::vector<int> split_begin;       // [R + 1] request r owns splits [split_begin[r], split_begin[r+1])
  std::vector<int> order;             // execution order of the splits (most work first)
  size_t partial_rows = 0;            // sum over splits of the request's lanes
  int max_lanes = 0;                  // most query rows (s_q * heads) of one request
  int max_splits = 0;                 // most splits of one request
  friend bool operator==(const DecodePlan&, const DecodePlan&) = default;
};

// q_begin [R + 1] and seq_lens [R] as validated by the backend; lanes_per_group
// is the kernels' vector width (a job's cost grows with ceil(lanes / width)).
// batch_invariant: cut every request by its length alone
// (batch_invariant_split_ends) instead of balancing the batch over the threads.
DecodePlan plan_decode(const std::vector<int32_t>& q_begin, const std::vector<int32_t>& seq_lens, int num_heads,
                       int lanes_per_group, int threads, bool batch_invariant = false);

// The batch-invariant mode's split ends of a request of `len` keys (the last
// is len; one split [0, len) when len < 2 * kMinSplitKeys).
std::vector<int> batch_invariant_split_ends(int len);

}  // namespace lattn::cpu
