// How the `cpu` decode backend cuts a batch into split jobs
// (src/cpu/decode_plan.h): splits tile every request's keys exactly, on
// key-tile boundaries; by count, a lone long request is split for the
// threads and a big batch is not; a fixed split size cuts every request at
// the same keys whatever the batch and the thread count (the batch-invariant
// mode's rule: by the request's length alone); a short lone
// request gets one job per thread rather than splits below 512 keys, and no
// split is much shorter than kMinSplitKeys.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cpu/decode_plan.h"

namespace lattn::cpu {
namespace {

std::vector<int32_t> offsets(int requests) {
  std::vector<int32_t> q(static_cast<size_t>(requests) + 1);
  for (int r = 0; r <= requests; ++r) q[size_t(r)] = r;
  return q;
}

// Splits of each request are contiguous, in key order, cover [0, len), and
// start on kSplitAlign multiples; partial rows do not overlap.
void check_tiling(const DecodePlan& plan, const std::vector<int32_t>& seq_lens, int heads) {
  size_t rows = 0;
  for (int r = 0; r < int(seq_lens.size()); ++r) {
    int next = 0;
    for (int s = plan.split_begin[r]; s < plan.split_begin[r + 1]; ++s) {
      const DecodeSplit& sp = plan.splits[size_t(s)];
      EXPECT_EQ(sp.request, r);
      EXPECT_EQ(sp.key_begin, next);
      EXPECT_EQ(sp.key_begin % kSplitAlign, 0);
      EXPECT_EQ(sp.first_row, rows);
      rows += size_t(heads);
      next = sp.key_end;
    }
    EXPECT_EQ(next, seq_lens[size_t(r)]) << "request " << r;
  }
  EXPECT_EQ(plan.partial_rows, rows);
  EXPECT_EQ(plan.order.size(), plan.splits.size());
}

TEST(CpuDecodePlan, ByCountSplitsALoneLongRequestForTheThreads) {
  const std::vector<int32_t> lens = {65536};
  const DecodePlan plan = plan_decode(offsets(1), lens, 16, 16, 2);
  check_tiling(plan, lens, 16);
  EXPECT_EQ(plan.splits.size(), size_t(2 * kJobsPerThread));
  // One thread: nothing to share, no split.
  EXPECT_EQ(plan_decode(offsets(1), lens, 16, 16, 1).splits.size(), 1u);
}

TEST(CpuDecodePlan, ByCountLeavesABigBatchWhole) {
  const std::vector<int32_t> lens(16, 4096);
  const DecodePlan plan = plan_decode(offsets(16), lens, 16, 16, 2);
  check_tiling(plan, lens, 16);
  EXPECT_EQ(plan.splits.size(), 16u);
}

// (key_begin, key_end) of request 0's splits.
std::vector<std::pair<int, int>> ranges(const DecodePlan& plan) {
  std::vector<std::pair<int, int>> r;
  for (int s = plan.split_begin[0]; s < plan.split_begin[1]; ++s) {
    r.emplace_back(plan.splits[size_t(s)].key_begin, plan.splits[size_t(s)].key_end);
  }
  return r;
}

TEST(CpuDecodePlan, ByCountShortLoneRequestGetsOneJobPerThread) {
  using R = std::vector<std::pair<int, int>>;
  // 16 heads = one vector group; 2 threads.
  EXPECT_EQ(ranges(plan_decode(offsets(1), {1024}, 16, 16, 2)), (R{{0, 512}, {512, 1024}}));
  EXPECT_EQ(ranges(plan_decode(offsets(1), {1025}, 16, 16, 2)), (R{{0, 512}, {512, 1025}}));
  EXPECT_EQ(ranges(plan_decode(offsets(1), {1536}, 16, 16, 2)), (R{{0, 768}, {768, 1536}}));
  EXPECT_EQ(ranges(plan_decode(offsets(1), {700}, 16, 16, 2)), (R{{0, 320}, {320, 700}}));
  // Long enough for two jobs per thread of 512 keys or more.
  EXPECT_EQ(ranges(plan_decode(offsets(1), {2048}, 16, 16, 2)), (R{{0, 512}, {512, 1024}, {1024, 1536}, {1536, 2048}}));
  EXPECT_EQ(ranges(plan_decode(offsets(1), {4096}, 16, 16, 2)),
            (R{{0, 1024}, {1024, 2048}, {2048, 3072}, {3072, 4096}}));
  // 128 heads (8 groups): the same cut, the work per key being the same for every split.
  EXPECT_EQ(ranges(plan_decode(offsets(1), {1024}, 128, 16, 2)), (R{{0, 512}, {512, 1024}}));
  // Under 2 * kMinSplitKeys keys: never split.
  EXPECT_EQ(ranges(plan_decode(offsets(1), {511}, 16, 16, 2)), (R{{0, 511}}));
  EXPECT_EQ(ranges(plan_decode(offsets(1), {0}, 16, 16, 2)), (R{{0, 0}}));
  // Small batches keep two jobs per thread when their pieces are long enough.
  EXPECT_EQ(plan_decode(offsets(3), {1024, 1024, 1024}, 16, 16, 2).splits.size(), 6u);
  EXPECT_EQ(plan_decode(offsets(2), {1024, 1024}, 16, 16, 2).splits.size(), 4u);
}

// Every length around the key-tile, kMinSplitKeys and kPreferredSplitKeys
// boundaries, alone and beside a batchmate, odd and even head counts, 1-4
// threads: exact tiling, max_splits right, no split much shorter than
// kMinSplitKeys, never more jobs than kJobsPerThread per thread for a lone request.
TEST(CpuDecodePlan, ByCountSplitBoundaries) {
  const std::vector<int32_t> lens = {0,   1,    63,   64,   65,   255,  256,  257,  511,  512,  513,  767,
                                     768, 1023, 1024, 1025, 1087, 1088, 1536, 2047, 2048, 2049, 4097, 65537};
  for (int threads : {1, 2, 3, 4}) {
    for (int heads : {1, 3, 16, 17, 128}) {
      for (int32_t len : lens) {
        for (const std::vector<int32_t>& batch : {std::vector<int32_t>{len}, std::vector<int32_t>{len, 5}}) {
          SCOPED_TRACE("threads " + std::to_string(threads) + " heads " + std::to_string(heads) + " len " +
                       std::to_string(len) + " batch " + std::to_string(batch.size()));
          const DecodePlan plan = plan_decode(offsets(int(batch.size())), batch, heads, 16, threads);
          check_tiling(plan, batch, heads);
          int most = 0;
          for (int r = 0; r < int(batch.size()); ++r) {
            const int n = plan.split_begin[r + 1] - plan.split_begin[r];
            most = std::max(most, n);
            EXPECT_LE(n, std::max(1, batch[size_t(r)] / kMinSplitKeys));
            for (int s = plan.split_begin[r]; n > 1 && s < plan.split_begin[r + 1]; ++s) {
              EXPECT_GE(plan.splits[size_t(s)].key_end - plan.splits[size_t(s)].key_begin, kMinSplitKeys - kSplitAlign);
            }
          }
          EXPECT_EQ(plan.max_splits, most);
          if (batch.size() == 1) {
            EXPECT_LE(int(plan.splits.size()), kJobsPerThread * threads);
          }
          if (threads == 1) {
            EXPECT_EQ(plan.splits.size(), batch.size());
          }
        }
      }
    }
  }
}

TEST(CpuDecodePlan, BatchInvariantSplitsFollowTheLengthOnly) {
  // Under 512 keys: one split; 512-1023: two halves at the tile nearest the
  // middle (as the balanced plan cuts a lone request on two threads); from
  // 1024: every kBatchInvariantSplitKeys keys.
  EXPECT_EQ(batch_invariant_split_ends(0), (std::vector<int>{0}));
  EXPECT_EQ(batch_invariant_split_ends(511), (std::vector<int>{511}));
  EXPECT_EQ(batch_invariant_split_ends(512), (std::vector<int>{256, 512}));
  EXPECT_EQ(batch_invariant_split_ends(700), (std::vector<int>{320, 700}));
  EXPECT_EQ(batch_invariant_split_ends(1023), (std::vector<int>{512, 1023}));
  EXPECT_EQ(batch_invariant_split_ends(1024), (std::vector<int>{512, 1024}));
  EXPECT_EQ(batch_invariant_split_ends(1025), (std::vector<int>{512, 1024, 1025}));
  EXPECT_EQ(ranges(plan_decode(offsets(1), {512}, 16, 16, 2)), ranges(plan_decode(offsets(1), {512}, 16, 16, 2, true)));
  EXPECT_EQ(ranges(plan_decode(offsets(1), {700}, 16, 16, 2)), ranges(plan_decode(offsets(1), {700}, 16, 16, 2, true)));

  const std::vector<int32_t> lens = {0, 1, 63, 300, 511, 512, 513, 700, 1000, 1023, 1024, 1025, 2048, 70000};
  for (int32_t len : lens) {
    const std::vector<int32_t> alone = {len};
    const std::vector<int32_t> batch = {5, len, 70000, 0, 600};
    for (int threads : {1, 2, 16}) {
      SCOPED_TRACE("len " + std::to_string(len) + " threads " + std::to_string(threads));
      const DecodePlan a = plan_decode(offsets(1), alone, 8, 16, threads, true);
      const DecodePlan b = plan_decode(offsets(5), batch, 8, 16, threads, true);
      check_tiling(a, alone, 8);
      check_tiling(b, batch, 8);
      const std::vector<int> ends = batch_invariant_split_ends(len);
      ASSERT_EQ(a.splits.size(), ends.size());
      ASSERT_EQ(b.split_begin[2] - b.split_begin[1], int(ends.size()));
      for (size_t s = 0; s < ends.size(); ++s) {
        EXPECT_EQ(a.splits[s].key_end, ends[s]);
        EXPECT_EQ(a.splits[s].key_begin, b.splits[size_t(b.split_begin[1]) + s].key_begin);
        EXPECT_EQ(a.splits[s].key_end, b.splits[size_t(b.split_begin[1]) + s].key_end);
      }
      EXPECT_EQ(b.split_begin[3] - b.split_begin[2], (70000 + 511) / 512);
    }
  }
}

}  // namespace
}  // namespace lattn::cpu
