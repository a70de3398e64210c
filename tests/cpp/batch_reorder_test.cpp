// Decodes-first reordering (TV_REORDER, exact swap lists; minimal swaps over
// random batches) and the decode/prefill split (TV_SPLIT).
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "lattn/batch_reorder.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "support/metadata_test_util.h"

namespace lattn {
namespace {

using Swaps = std::vector<std::pair<int, int>>;

struct Reordered {
  Swaps swaps;
  std::vector<int32_t> tokens;  // after the swaps
  bool modified = false;
};

Reordered reorder(std::vector<int32_t> tokens, int threshold = 1) {
  Reordered r;
  const std::vector<int32_t> scheduled = tokens;
  r.modified = reorder_batch_to_split_decodes_and_prefills(
      scheduled,
      [&](int i, int j) {
        r.swaps.emplace_back(i, j);
        std::swap(tokens[size_t(i)], tokens[size_t(j)]);
      },
      threshold);
  r.tokens = tokens;
  return r;
}

TEST(BatchReorder, TV_REORDER) {
  struct Case {
    std::vector<int32_t> tokens;
    int threshold;
    Swaps swaps;
    std::vector<int32_t> after;
    bool modified;
  };
  const std::vector<Case> cases = {
      {{5, 1, 1, 7, 1}, 1, {{0, 4}}, {1, 1, 1, 7, 5}, true},
      {{9, 8, 1, 1}, 1, {{0, 3}, {1, 2}}, {1, 1, 8, 9}, true},
      {{1, 6, 6, 1, 1}, 1, {{1, 4}, {2, 3}}, {1, 1, 1, 6, 6}, true},
      {{1, 1, 3}, 1, {}, {1, 1, 3}, false},
      {{4, 4}, 1, {}, {4, 4}, false},
      {{1, 1}, 1, {}, {1, 1}, false},
      {{3, 2, 1, 8}, 2, {{0, 2}}, {1, 2, 3, 8}, true},
  };
  for (const Case& c : cases) {
    const Reordered r = reorder(c.tokens, c.threshold);
    EXPECT_EQ(r.swaps, c.swaps);
    EXPECT_EQ(r.tokens, c.after);
    EXPECT_EQ(r.modified, c.modified);
  }
  EXPECT_FALSE(reorder({}).modified);
}

// The InputBatch interface and the builder's hook use the same algorithm.
class VectorBatch : public InputBatch {
 public:
  explicit VectorBatch(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {}
  int num_reqs() const override { return int(tokens_.size()); }
  int32_t num_scheduled_tokens(int i) const override { return tokens_[size_t(i)]; }
  void swap_states(int i, int j) override { std::swap(tokens_[size_t(i)], tokens_[size_t(j)]); }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::vector<int32_t> tokens_;
};

TEST(BatchReorder, InputBatchAndBuilderHook) {
  VectorBatch batch({9, 8, 1, 1});
  EXPECT_TRUE(reorder_batch_to_split_decodes_and_prefills(batch));
  EXPECT_EQ(batch.tokens(), (std::vector<int32_t>{1, 1, 8, 9}));

  MetadataBuilderConfig c;
  c.context_chunk_workspace_size = 64;
  c.reorder_batch_threshold = 2;
  VectorBatch spec({3, 2, 1, 8});
  EXPECT_TRUE(MlaMetadataBuilder(c).reorder_batch(spec));
  EXPECT_EQ(spec.tokens(), (std::vector<int32_t>{1, 2, 3, 8}));
}

TEST(BatchReorder, RandomBatchesReorderWithTheFewestSwaps) {
  std::mt19937_64 rng(31337);
  for (int iter = 0; iter < 5000; ++iter) {
    const int n = std::uniform_int_distribution<int>(0, 40)(rng);
    const int threshold = std::uniform_int_distribution<int>(1, 3)(rng);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int32_t& t : tokens) {
      t = std::uniform_int_distribution<int>(0, 2)(rng) == 0
              ? std::uniform_int_distribution<int>(threshold + 1, 50)(rng)
              : std::uniform_int_distribution<int>(1, threshold)(rng);
    }
    int num_decodes = 0;
    for (int32_t t : tokens) num_decodes += t <= threshold;
    // Each swap can move at most one prefill out of the decode region, so
    // the prefills found inside it are a lower bound on the swaps.
    int misplaced = 0;
    for (int i = 0; i < num_decodes; ++i) misplaced += tokens[size_t(i)] > threshold;

    const Reordered r = reorder(tokens, threshold);
    ASSERT_EQ(int(r.swaps.size()), misplaced) << "iteration " << iter;
    EXPECT_EQ(r.modified, misplaced > 0);
    for (int i = 0; i < n; ++i) ASSERT_EQ(r.tokens[size_t(i)] <= threshold, i < num_decodes) << "iteration " << iter;
    // The multiset of requests is unchanged.
    std::vector<int32_t> a = tokens, b = r.tokens;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a, b);
    // Every swap exchanges a prefill inside the region with a decode outside.
    for (auto [p, d] : r.swaps) {
      EXPECT_LT(p, num_decodes);
      EXPECT_GE(d, num_decodes);
    }
    // The split of the reordered batch agrees.
    std::vector<int32_t> qsl{0};
    int max_query_len = 0;
    for (int32_t t : r.tokens) {
      qsl.push_back(qsl.back() + t);
      max_query_len = std::max<int>(max_query_len, t);
    }
    const DecodePrefillSplit s = split_decodes_and_prefills(qsl, qsl.back(), max_query_len, threshold);
    EXPECT_EQ(s.num_decodes, num_decodes);
    EXPECT_EQ(s.num_prefills, n - num_decodes);
    EXPECT_EQ(s.num_decode_tokens, qsl[size_t(num_decodes)]);
    EXPECT_EQ(s.num_decode_tokens + s.num_prefill_tokens, qsl.back());
  }
}

TEST(BatchReorder, TV_SPLIT) {
  auto split = [](std::vector<int32_t> qsl, int num_tokens, int max_q, int threshold) {
    return split_decodes_and_prefills(qsl, num_tokens, max_q, threshold);
  };
  EXPECT_EQ(split({0, 1, 2, 3, 8, 14}, 14, 6, 1), (DecodePrefillSplit{3, 2, 3, 11}));
  EXPECT_EQ(split({0, 1, 2, 3}, 3, 1, 1), (DecodePrefillSplit{3, 0, 3, 0}));
  EXPECT_EQ(split({0, 4, 10}, 10, 6, 1), (DecodePrefillSplit{0, 2, 0, 10}));
  EXPECT_EQ(split({0, 2, 3, 5, 9}, 9, 4, 2), (DecodePrefillSplit{3, 1, 5, 4}));
  try {
    split({0, 5, 6}, 6, 5, 1);
    ADD_FAILURE() << "no exception";
  } catch (const AssertionError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("not reordered"), std::string::npos) << what;
    EXPECT_NE(what.find("request 0 is a prefill (query_len 5)"), std::string::npos) << what;
    EXPECT_NE(what.find("request 1 after it has query_len 1"), std::string::npos) << what;
  }

  // Through CommonAttentionMetadata.
  const std::vector<RequestSpec> reqs = {{1, 3, {0}}, {1, 0, {1}}, {5, 2, {2}}};
  test::CommonMetadataArrays a = test::make_common(reqs, 16);
  EXPECT_EQ(split_decodes_and_prefills(a.common), (DecodePrefillSplit{2, 1, 2, 5}));
  a.common.query_start_loc_cpu = Tensor();
  EXPECT_THROW(split_decodes_and_prefills(a.common), ValueError);
}

}  // namespace
}  // namespace lattn
