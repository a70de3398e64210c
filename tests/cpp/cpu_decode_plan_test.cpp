// How the `cpu` decode backend cuts a batch into split jobs
// (src/cpu/decode_plan.h): splits tile every request's keys exactly, on
// key-tile boundaries; by count, a lone long request is split for the
// threads and a big batch is not; a fixed split size cuts every request at
// the same keys whatever the batch and the thread count.
#include <gtest/gtest.h>

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

TEST(CpuDecodePlan, FixedSplitSizeIgnoresBatchmatesAndThreads) {
  const std::vector<int32_t> alone = {1000};
  const std::vector<int32_t> batch = {5, 1000, 70000, 0};
  for (int threads : {1, 2, 16}) {
    const DecodePlan a = plan_decode(offsets(1), alone, 8, 16, threads, 256);
    const DecodePlan b = plan_decode(offsets(4), batch, 8, 16, threads, 256);
    check_tiling(a, alone, 8);
    check_tiling(b, batch, 8);
    ASSERT_EQ(a.splits.size(), 4u);
    ASSERT_EQ(b.split_begin[2] - b.split_begin[1], 4);
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(a.splits[size_t(s)].key_begin, b.splits[size_t(b.split_begin[1] + s)].key_begin);
      EXPECT_EQ(a.splits[size_t(s)].key_end, b.splits[size_t(b.split_begin[1] + s)].key_end);
    }
    EXPECT_EQ(b.split_begin[3] - b.split_begin[2], (70000 + 255) / 256);
  }
}

}  // namespace
}  // namespace lattn::cpu
