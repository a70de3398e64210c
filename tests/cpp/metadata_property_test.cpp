// Randomized properties of the metadata builder over thousands of batches:
// the context-chunk plan gathers every context token of every prefill
// exactly once, in order, page-aligned and within the workspace; the views
// slice the parent consistently; slots and block tables match a naive
// per-token model; the CommonAttentionMetadata path agrees with the
// RequestSpec path.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "support/metadata_test_util.h"

namespace lattn {
namespace {

using test::to_rows;
using test::to_vec;
using Vec = std::vector<int64_t>;

struct RandomBatch {
  std::vector<RequestSpec> requests;
  int block_size = 16;
  int threshold = 1;
  int64_t workspace = 0;
  int num_decodes = 0;
};

// Decodes first, then prefills; block tables are random permutations of a
// pool of blocks (hostile: non-contiguous, shared pool), sometimes longer
// than needed; contexts are often 0, sometimes page multiples, sometimes
// long for decodes only.
RandomBatch random_batch(std::mt19937_64& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  RandomBatch b;
  const int block_sizes[] = {1, 2, 3, 4, 16, 64};
  b.block_size = block_sizes[uniform(0, 5)];
  b.threshold = uniform(0, 3) == 0 ? uniform(2, 4) : 1;
  b.num_decodes = uniform(0, 12);
  const int num_prefills = uniform(b.num_decodes == 0 ? 1 : 0, 8);
  const int num_blocks_pool = 4096;
  std::vector<int32_t> pool(num_blocks_pool);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  size_t next = 0;
  auto table = [&](int64_t seq_len) {
    const int64_t needed = (seq_len + b.block_size - 1) / b.block_size;
    const int64_t extra = uniform(0, 2);
    std::vector<int32_t> row;
    for (int64_t j = 0; j < needed + extra; ++j) row.push_back(pool[next++ % pool.size()]);
    return row;
  };
  auto context = [&](int max_len) {
    switch (uniform(0, 3)) {
      case 0:
        return 0;
      case 1:
        return uniform(1, 8) * b.block_size;
      default:
        return uniform(1, max_len);
    }
  };
  int prefills_with_context = 0;
  for (int i = 0; i < b.num_decodes; ++i) {
    const int query_len = uniform(1, b.threshold);
    const int ctx = uniform(0, 4) == 0 ? uniform(0, 3000) : context(300);
    b.requests.push_back({query_len, ctx, table(ctx + query_len)});
  }
  for (int i = 0; i < num_prefills; ++i) {
    const int query_len = uniform(b.threshold + 1, b.threshold + 40);
    const int ctx = context(700);
    prefills_with_context += ctx > 0;
    b.requests.push_back({query_len, ctx, table(ctx + query_len)});
  }
  // A workspace of at least one page per prefill with context (else the
  // build refuses, tested elsewhere), sometimes tight, sometimes large.
  const int64_t minimum = int64_t(std::max(prefills_with_context, 1)) * b.block_size;
  b.workspace = minimum + uniform(0, 3) * uniform(0, 600);
  return b;
}

MlaMetadataBuilder builder_for(const RandomBatch& b) {
  MetadataBuilderConfig c;
  c.block_size = b.block_size;
  c.context_chunk_workspace_size = b.workspace;
  c.reorder_batch_threshold = b.threshold;
  return MlaMetadataBuilder(c);
}

// The chunk plan, replayed as gather_cache would: each prefill's context
// tokens, in gather order, must be exactly 0, 1, ..., context_len - 1.
void check_chunk_plan(const RandomBatch& b, const MlaMetadata& m) {
  const PrefillMetadata& p = *m.prefill;
  const ContextChunkPlan& c = p.chunks;
  const int num_prefills = p.num_prefills;
  std::vector<Vec> gathered(static_cast<size_t>(num_prefills));
  int64_t max_context_all = 0, max_context_prefill = 0;
  int with_context = 0;
  for (const RequestSpec& r : b.requests) max_context_all = std::max<int64_t>(max_context_all, r.num_computed_tokens);
  for (int i = 0; i < num_prefills; ++i) {
    const int64_t ctx = b.requests[size_t(b.num_decodes + i)].num_computed_tokens;
    max_context_prefill = std::max(max_context_prefill, ctx);
    with_context += ctx > 0;
  }
  if (max_context_prefill == 0) {
    EXPECT_EQ(c.num_chunks, 0);
    return;
  }
  ASSERT_GT(c.max_context_chunk, 0);
  EXPECT_EQ(c.max_context_chunk % b.block_size, 0);
  EXPECT_LE(c.max_context_chunk * with_context, b.workspace);
  EXPECT_EQ(c.num_prefills_with_context, with_context);
  EXPECT_EQ(c.num_chunks, (max_context_all + c.max_context_chunk - 1) / c.max_context_chunk);
  const auto starts = to_rows(c.starts_cpu);
  const auto cu = to_rows(c.cu_seq_lens_cpu);
  ASSERT_EQ(int(starts.size()), c.num_chunks);
  for (int i = 0; i < c.num_chunks; ++i) {
    ASSERT_EQ(int(cu[size_t(i)].size()), num_prefills + 1);
    EXPECT_EQ(cu[size_t(i)][0], 0);
    int64_t longest = 0;
    for (int j = 0; j < num_prefills; ++j) {
      const int64_t start = starts[size_t(i)][size_t(j)];
      const int64_t len = cu[size_t(i)][size_t(j + 1)] - cu[size_t(i)][size_t(j)];
      ASSERT_GE(len, 0);
      EXPECT_LE(len, c.max_context_chunk);
      EXPECT_EQ(start % b.block_size, 0) << "gather_cache needs page-aligned starts";
      longest = std::max(longest, len);
      for (int64_t t = 0; t < len; ++t) gathered[size_t(j)].push_back(start + t);
    }
    EXPECT_EQ(c.seq_tot[size_t(i)], cu[size_t(i)].back());
    EXPECT_LE(c.seq_tot[size_t(i)], b.workspace);
    EXPECT_EQ(c.max_seq_lens[size_t(i)], longest);
  }
  for (int j = 0; j < num_prefills; ++j) {
    Vec expected(size_t(b.requests[size_t(b.num_decodes + j)].num_computed_tokens));
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(gathered[size_t(j)], expected) << "prefill " << j;
  }
}

// Parent arrays against a naive per-request / per-token model, and the views
// against the parent.
void check_arrays_and_views(const RandomBatch& b, const MlaMetadata& m) {
  const int num_reqs = int(b.requests.size());
  Vec qsl{0}, seq_lens, context_lens, slots;
  int64_t decode_tokens = 0;
  for (int r = 0; r < num_reqs; ++r) {
    const RequestSpec& q = b.requests[size_t(r)];
    qsl.push_back(qsl.back() + q.query_len);
    seq_lens.push_back(q.num_computed_tokens + q.query_len);
    context_lens.push_back(q.num_computed_tokens);
    if (r < b.num_decodes) decode_tokens += q.query_len;
    for (int64_t t = q.num_computed_tokens; t < q.num_computed_tokens + q.query_len; ++t) {
      slots.push_back(int64_t(q.block_table[size_t(t / b.block_size)]) * b.block_size + t % b.block_size);
    }
  }
  ASSERT_EQ(m.num_reqs, num_reqs);
  ASSERT_EQ(m.num_decodes, b.num_decodes);
  ASSERT_EQ(m.num_prefills, num_reqs - b.num_decodes);
  ASSERT_EQ(m.num_decode_tokens, decode_tokens);
  ASSERT_EQ(m.num_prefill_tokens, qsl.back() - decode_tokens);
  ASSERT_EQ(m.num_actual_tokens, qsl.back());
  EXPECT_EQ(to_vec(m.query_start_loc_cpu), qsl);
  EXPECT_EQ(to_vec(m.seq_lens_cpu), seq_lens);
  EXPECT_EQ(to_vec(m.context_lens_cpu), context_lens);
  EXPECT_EQ(to_vec(m.slot_mapping_cpu), slots);
  const auto table = to_rows(m.block_table_cpu);
  for (int r = 0; r < num_reqs; ++r) {
    const std::vector<int32_t>& given = b.requests[size_t(r)].block_table;
    for (size_t j = 0; j < table[size_t(r)].size(); ++j) {
      EXPECT_EQ(table[size_t(r)][j], j < given.size() ? given[j] : 0);
    }
  }
  const Vec ssl = to_vec(m.seq_start_loc_cpu);
  for (int r = 0; r < num_reqs; ++r) EXPECT_EQ(ssl[size_t(r + 1)] - ssl[size_t(r)], seq_lens[size_t(r)]);

  const int nd = m.num_decodes;
  if (nd > 0) {
    const DecodeMetadata& d = *m.decode;
    EXPECT_EQ(d.num_decodes, nd);
    EXPECT_EQ(to_vec(d.query_start_loc_cpu), Vec(qsl.begin(), qsl.begin() + nd + 1));
    EXPECT_EQ(to_vec(d.seq_lens_cpu), Vec(seq_lens.begin(), seq_lens.begin() + nd));
    EXPECT_EQ(to_vec(d.slot_mapping_cpu), Vec(slots.begin(), slots.begin() + decode_tokens));
    EXPECT_EQ(d.block_table_cpu.data(), m.block_table_cpu.data());
    EXPECT_EQ(d.max_decode_seq_len, *std::max_element(seq_lens.begin(), seq_lens.begin() + nd));
  } else {
    EXPECT_EQ(m.decode_metadata(), nullptr);
  }
  if (m.num_prefills > 0) {
    const PrefillMetadata& p = *m.prefill;
    Vec rebased;
    for (size_t r = size_t(nd); r < qsl.size(); ++r) rebased.push_back(qsl[r] - qsl[size_t(nd)]);
    EXPECT_EQ(to_vec(p.query_start_loc_cpu), rebased);
    EXPECT_EQ(to_vec(p.seq_lens_cpu), Vec(seq_lens.begin() + nd, seq_lens.end()));
    EXPECT_EQ(to_vec(p.context_lens_cpu), Vec(context_lens.begin() + nd, context_lens.end()));
    EXPECT_EQ(to_vec(p.slot_mapping_cpu), Vec(slots.begin() + decode_tokens, slots.end()));
    EXPECT_EQ(to_rows(p.block_table_cpu), std::vector<Vec>(table.begin() + nd, table.end()));
    EXPECT_EQ(p.max_prefill_seq_len, *std::max_element(seq_lens.begin() + nd, seq_lens.end()));
    check_chunk_plan(b, m);
  } else {
    EXPECT_EQ(m.prefill_metadata(), nullptr);
  }
}

TEST(MetadataBuilderProperty, RandomBatchesPlanAndSliceConsistently) {
  std::mt19937_64 rng(20240611);
  for (int iter = 0; iter < 3000; ++iter) {
    const RandomBatch b = random_batch(rng);
    SCOPED_TRACE("iteration " + std::to_string(iter));
    const MlaMetadata m = builder_for(b).build(b.requests);
    check_arrays_and_views(b, m);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(MetadataBuilderProperty, CommonMetadataPathAgrees) {
  std::mt19937_64 rng(77);
  for (int iter = 0; iter < 1000; ++iter) {
    const RandomBatch b = random_batch(rng);
    SCOPED_TRACE("iteration " + std::to_string(iter));
    test::CommonMetadataArrays a = test::make_common(b.requests, b.block_size);
    const MlaMetadataBuilder builder = builder_for(b);
    const MlaMetadata from_common = builder.build(a.common);
    check_arrays_and_views(b, from_common);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(MetadataBuilderProperty, TooSmallWorkspaceIsAlwaysRefused) {
  // Below one page per prefill with context the build must refuse, and
  // never return a partial plan.
  std::mt19937_64 rng(5);
  int refused = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    RandomBatch b = random_batch(rng);
    int with_context = 0;
    for (size_t r = size_t(b.num_decodes); r < b.requests.size(); ++r)
      with_context += b.requests[r].num_computed_tokens > 0;
    const int64_t one_page_each = int64_t(with_context) * b.block_size;
    if (one_page_each < 2) continue;  // no positive workspace is too small
    b.workspace = std::uniform_int_distribution<int64_t>(1, one_page_each - 1)(rng);
    EXPECT_THROW(builder_for(b).build(b.requests), AssertionError);
    ++refused;
  }
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace lattn
