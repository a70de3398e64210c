// Split planning of the `cpu` decode backend (see decode_plan.h).
#include "cpu/decode_plan.h"

#include <algorithm>
#include <numeric>

namespace lattn::cpu {

std::vector<int> batch_invariant_split_ends(int len) {
  std::vector<int> ends;
  if (len >= 2 * kMinSplitKeys && len < 2 * kBatchInvariantSplitKeys) {
    ends.push_back((len / 2 + kSplitAlign / 2) / kSplitAlign * kSplitAlign);
  } else {
    for (int64_t end = kBatchInvariantSplitKeys; end < len; end += kBatchInvariantSplitKeys) ends.push_back(int(end));
  }
  ends.push_back(len);
  return ends;
}

DecodePlan plan_decode(const std::vector<int32_t>& q_begin, const std::vector<int32_t>& seq_lens, int num_heads,
                       int lanes_per_group, int threads, bool batch_invariant) {
  DecodePlan plan;
  plan.q_begin = q_begin;
  plan.seq_lens = seq_lens;
  const int requests = int(seq_lens.size());
  plan.request_of_token.resize(q_begin.empty() ? 0 : size_t(q_begin.back()));
  std::vector<int64_t> groups(static_cast<size_t>(requests));
  int64_t total_work = 0;  // keys x vector groups
  for (int r = 0; r < requests; ++r) {
    for (int t = q_begin[r]; t < q_begin[r + 1]; ++t) plan.request_of_token[size_t(t)] = r;
    const int lanes = (q_begin[r + 1] - q_begin[r]) * num_heads;
    plan.max_lanes = std::max(plan.max_lanes, lanes);
    groups[r] = (lanes + lanes_per_group - 1) / lanes_per_group;
    total_work += int64_t(seq_lens[r]) * groups[r];
  }
  const int64_t target_jobs = threads > 1 ? kJobsPerThread * int64_t(threads) : 1;
  const int64_t work_per_job = std::max<int64_t>(1, (total_work + target_jobs - 1) / target_jobs);

  plan.split_begin.push_back(0);
  for (int r = 0; r < requests; ++r) {
    const int len = seq_lens[r];
    const int lanes = (q_begin[r + 1] - q_begin[r]) * num_heads;
    const auto add_split = [&](int begin, int end) {
      plan.splits.push_back({r, begin, end, plan.partial_rows});
      plan.partial_rows += size_t(lanes);
    };
    if (batch_invariant) {
      int begin = 0;
      for (const int end : batch_invariant_split_ends(len)) {
        add_split(begin, end);
        begin = end;
      }
    } else {
      // Keys per job for kJobsPerThread jobs per thread; one job per thread
      // instead when that would cut jobs shorter than kPreferredSplitKeys.
      int64_t chunk = (work_per_job + groups[r] - 1) / std::max<int64_t>(groups[r], 1);
      if (chunk < kPreferredSplitKeys) chunk *= kJobsPerThread;
      chunk = std::max<int64_t>(chunk, kMinSplitKeys);
      const int64_t splits = std::max<int64_t>(1, std::min<int64_t>((len + chunk - 1) / chunk, len / kMinSplitKeys));
      // Even pieces, cut at the key-tile multiple nearest to each i * len / splits.
      int begin = 0;
      for (int64_t i = 1; i <= splits; ++i) {
        const int end = i == splits ? len : int((i * len / splits + kSplitAlign / 2) / kSplitAlign * kSplitAlign);
        add_split(begin, end);
        begin = end;
      }
    }
    plan.split_begin.push_back(int(plan.splits.size()));
    plan.max_splits = std::max(plan.max_splits, plan.split_begin[size_t(r) + 1] - plan.split_begin[size_t(r)]);
  }
  plan.order.resize(plan.splits.size());
  std::iota(plan.order.begin(), plan.order.end(), 0);
  const auto work = [&](int i) {
    const DecodeSplit& s = plan.splits[size_t(i)];
    return int64_t(s.key_end - s.key_begin) * groups[s.request];
  };
  std::stable_sort(plan.order.begin(), plan.order.end(), [&](int a, int b) { return work(a) > work(b); });
  return plan;
}

}  // namespace lattn::cpu
