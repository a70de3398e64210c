// The MLA metadata builder: the vLLM-derived worked examples (docs/metadata.md) that concern
// it (named after them), its refusals, and storage/device behaviour.
//
// The seed (V0) puts prefills first; lattn uses v1's decodes-first order, so
// vectors stated for a prefills-first batch are given here in the mirrored
// order, with the seed's numbers unchanged where order does not matter.
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/metadata/view_pairs.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "lattn/slot_mapping.h"
#include "support/metadata_test_util.h"

namespace lattn {
namespace {

using test::to_rows;
using test::to_vec;
using Rows = std::vector<std::vector<int64_t>>;
using Vec = std::vector<int64_t>;

// A block table of consecutive blocks starting at `first`, covering seq_len.
std::vector<int32_t> blocks(int first, int64_t seq_len, int block_size) {
  std::vector<int32_t> row(size_t((seq_len + block_size - 1) / block_size));
  std::iota(row.begin(), row.end(), first);
  return row;
}

RequestSpec request(int query_len, int context_len, int block_size, int first_block = 0) {
  return {query_len, context_len, blocks(first_block, query_len + context_len, block_size)};
}

MetadataBuilderConfig config(int block_size, int64_t workspace) {
  MetadataBuilderConfig c;
  c.block_size = block_size;
  c.context_chunk_workspace_size = workspace;
  return c;
}

// Expects `f` to throw E whose message contains every one of `parts`.
template <class E, class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// Four prefills (after `decode_contexts.size()` decodes) with the given
// contexts; returns the prefill view's chunk plan.
MlaMetadata build_with_contexts(const std::vector<int>& decode_contexts, const std::vector<int>& prefill_contexts,
                                int page, int64_t workspace) {
  std::vector<RequestSpec> reqs;
  int next_block = 0;
  for (int c : decode_contexts) {
    reqs.push_back(request(1, c, page, next_block));
    next_block += int(reqs.back().block_table.size());
  }
  for (int c : prefill_contexts) {
    reqs.push_back(request(3, c, page, next_block));
    next_block += int(reqs.back().block_table.size());
  }
  return MlaMetadataBuilder(config(page, workspace)).build(reqs);
}

// ---- seed test vectors -----------------------------------------------------------

TEST(MetadataBuilder, TV_CHUNK_1) {
  const MlaMetadata m = build_with_contexts({}, {700, 256, 100, 513}, 16, 1024);
  ASSERT_TRUE(m.prefill_metadata());
  const ContextChunkPlan& c = m.prefill->chunks;
  EXPECT_EQ(c.num_prefills_with_context, 4);
  EXPECT_EQ(c.max_context_chunk, 256);
  EXPECT_EQ(c.num_chunks, 3);
  // The seed's own example.
  EXPECT_EQ(to_rows(c.starts_cpu), (Rows{{0, 0, 0, 0}, {256, 256, 256, 256}, {512, 512, 512, 512}}));
  EXPECT_EQ(to_rows(c.cu_seq_lens_cpu),
            (Rows{{0, 256, 512, 612, 868}, {0, 256, 256, 256, 512}, {0, 188, 188, 188, 189}}));
  EXPECT_EQ(c.max_seq_lens, (std::vector<int32_t>{256, 256, 188}));
  EXPECT_EQ(c.seq_tot, (std::vector<int32_t>{868, 512, 189}));
  EXPECT_TRUE(m.prefill->has_context());
  EXPECT_EQ(to_vec(c.chunk_starts(1)), (Vec{256, 256, 256, 256}));
  EXPECT_EQ(to_vec(c.chunk_cu_seq_lens_cpu(2)), (Vec{0, 188, 188, 188, 189}));
}

TEST(MetadataBuilder, TV_CHUNK_2) {
  const MlaMetadata m = build_with_contexts({}, {700, 0, 100, 513}, 16, 1024);
  const ContextChunkPlan& c = m.prefill->chunks;
  EXPECT_EQ(c.num_prefills_with_context, 3);
  EXPECT_EQ(c.max_context_chunk, 336);  // round_down(1024 / 3 = 341, 16)
  EXPECT_EQ(c.num_chunks, 3);
  EXPECT_EQ(to_rows(c.cu_seq_lens_cpu), (Rows{{0, 336, 336, 436, 772}, {0, 336, 336, 336, 513}, {0, 28, 28, 28, 28}}));
  EXPECT_EQ(c.max_seq_lens, (std::vector<int32_t>{336, 336, 28}));
  EXPECT_EQ(c.seq_tot, (std::vector<int32_t>{772, 513, 28}));
  EXPECT_EQ(to_rows(c.starts_cpu), (Rows{{0, 0, 0, 0}, {336, 336, 336, 336}, {672, 672, 672, 672}}));
}

TEST(MetadataBuilder, TV_CHUNK_3) {
  // Seed rows [300, 0 | 2000, 1500] (prefills first); here decodes first.
  const MlaMetadata m = build_with_contexts({2000, 1500}, {300, 0}, 16, 1024);
  EXPECT_EQ(m.num_decodes, 2);
  EXPECT_EQ(m.num_prefills, 2);
  const ContextChunkPlan& c = m.prefill->chunks;
  EXPECT_EQ(c.max_context_chunk, 1024);
  EXPECT_EQ(c.num_chunks, 2);  // cdiv(2000, 1024): the decode's context counts
  EXPECT_EQ(to_rows(c.cu_seq_lens_cpu), (Rows{{0, 300, 300}, {0, 0, 0}}));
  EXPECT_EQ(c.seq_tot, (std::vector<int32_t>{300, 0}));
  EXPECT_EQ(c.max_seq_lens, (std::vector<int32_t>{300, 0}));
}

TEST(MetadataBuilder, TV_CHUNK_4) {
  const MlaMetadata m = build_with_contexts({}, {50, 60}, 16, 100);
  const ContextChunkPlan& c = m.prefill->chunks;
  EXPECT_EQ(c.max_context_chunk, 48);  // round_down(100 / 2, 16)
  EXPECT_EQ(c.num_chunks, 2);
  EXPECT_EQ(to_rows(c.cu_seq_lens_cpu), (Rows{{0, 48, 96}, {0, 2, 14}}));
  EXPECT_EQ(c.seq_tot, (std::vector<int32_t>{96, 14}));
  EXPECT_EQ(c.workspace_size, 100);
  expect_error<AssertionError>(
      [] {
        build_with_contexts({}, {50, 60}, 16, 10);
      },
      {"max_context_chunk > 0", "context_chunk_workspace_size 10", "page_size 16", "at least 32 rows"});
}

TEST(MetadataBuilder, NoChunkPlanWithoutPrefillContext) {
  // Decodes with long contexts but prefills without any: no plan (seed:
  // planning needs context_lens[prefills].max() > 0).
  const MlaMetadata m = build_with_contexts({5000}, {0, 0}, 16, 64);
  EXPECT_EQ(m.prefill->chunks.num_chunks, 0);
  EXPECT_FALSE(m.prefill->has_context());
  EXPECT_EQ(m.prefill->chunks.starts_cpu.size(0), 0);
}

TEST(MetadataBuilder, TV_WS) {
  EXPECT_EQ(mla_context_chunk_workspace_size(163840, 256, 16), 131072);
  EXPECT_EQ(mla_context_chunk_workspace_size(4096, 128, 16), 32768);
  EXPECT_EQ(mla_context_chunk_workspace_size(2048, 256, 16), 16384);
  EXPECT_EQ(mla_context_chunk_workspace_size(1024, 1024, 64), 131072);
  EXPECT_EQ(mla_context_chunk_workspace_size(32768, 1024, 64), 131072);
  expect_error<AssertionError>(
      [] { mla_context_chunk_workspace_size(512, 4096, 64); },
      {"context_chunk_workspace_size >= scheduler_config.max_num_seqs * cache_config.block_size",
       "131072 < 4096 * 64 = 262144"});
  expect_error<ValueError>([] { mla_context_chunk_workspace_size(0, 1, 16); }, {"max_model_len must be > 0, got 0"});
  // The seed's byte arithmetic: 2 * 576 * 131072 B = 144 MiB.
  EXPECT_EQ(2 * 576 * mla_context_chunk_workspace_size(163840, 256, 16), int64_t(144) << 20);
}

TEST(MetadataBuilder, TV_CUMSUM) {
  const std::vector<RequestSpec> reqs = {request(4, 0, 16), request(6, 0, 16, 1)};
  const MlaMetadata m = MlaMetadataBuilder(config(16, 64)).build(reqs);
  EXPECT_EQ(to_vec(m.query_start_loc_cpu), (Vec{0, 4, 10}));
  EXPECT_EQ(to_vec(m.seq_start_loc_cpu), (Vec{0, 4, 10}));  // seq_lens [4, 6]
}

TEST(MetadataBuilder, TV_BLOCKTABLE) {
  // Row [0, 1, 2] stores tokens in blocks 0, 1 and 2 (block_size 4, 12 tokens).
  const std::vector<RequestSpec> reqs = {{12, 0, {0, 1, 2}}};
  const MlaMetadata m = MlaMetadataBuilder(config(4, 64)).build(reqs);
  EXPECT_EQ(to_rows(m.block_table_cpu), (Rows{{0, 1, 2}}));
  EXPECT_EQ(to_vec(m.slot_mapping_cpu), (Vec{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(MetadataBuilder, TV_DECODE_QSL) {
  // Seed: [1 prefill of 3 tokens | 6 decodes], query_start_loc [0,3,4,...,9];
  // the view sliced from the back ([3, 9]) is rebased to [0, 6]. In v1 order
  // the decodes come first and the prefill view is the one rebased.
  std::vector<RequestSpec> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(request(1, 10 + i, 16, 2 * i));
  reqs.push_back(request(3, 0, 16, 20));
  const MlaMetadata m = MlaMetadataBuilder(config(16, 64)).build(reqs);
  EXPECT_EQ(to_vec(m.query_start_loc_cpu), (Vec{0, 1, 2, 3, 4, 5, 6, 9}));
  ASSERT_TRUE(m.decode_metadata() && m.prefill_metadata());
  EXPECT_EQ(to_vec(m.decode->query_start_loc_cpu), (Vec{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(to_vec(m.prefill->query_start_loc_cpu), (Vec{0, 3}));  // [6, 9] rebased
  // seq_start_loc is not rebased in the sliced view (seed).
  const Vec ssl = to_vec(m.seq_start_loc_cpu);
  EXPECT_EQ(to_vec(m.prefill->seq_start_loc_cpu), (Vec{ssl[6], ssl[7]}));
  EXPECT_EQ(ssl[6], 11 + 12 + 13 + 14 + 15 + 16);
  EXPECT_EQ(to_vec(m.decode->seq_start_loc_cpu), (Vec(ssl.begin(), ssl.begin() + 7)));
}

TEST(MetadataBuilder, TV_SLOT) {
  // Upstream's slot_mapping [35, 2, 17] at block_size 16: three decodes at
  // positions 3, 2, 1 of blocks 2, 0, 1.
  const std::vector<RequestSpec> reqs = {{1, 3, {2}}, {1, 2, {0}}, {1, 1, {1}}};
  const MlaMetadata m = MlaMetadataBuilder(config(16, 64)).build(reqs);
  const Vec slots = to_vec(m.slot_mapping_cpu);
  EXPECT_EQ(slots, (Vec{35, 2, 17}));
  const Vec expected_block = {2, 0, 1}, expected_offset = {3, 2, 1};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(slots[i] / 16, expected_block[i]);
    EXPECT_EQ(slots[i] % 16, expected_offset[i]);
  }

  // Sliding window: prompt of 10, window 8, block 4 -> [-1,-1,2,3,4,5,6,7,0,1]
  // (the third block reuses block 0, as a window's ring of blocks does).
  MetadataBuilderConfig c = config(4, 64);
  c.sliding_window = 8;
  const std::vector<RequestSpec> prompt = {{10, 0, {0, 1, 0}}};
  const MlaMetadata w = MlaMetadataBuilder(c).build(prompt);
  EXPECT_EQ(to_vec(w.slot_mapping_cpu), (Vec{-1, -1, 2, 3, 4, 5, 6, 7, 0, 1}));

  // The public helpers give the same.
  EXPECT_EQ(compute_slot_mapping_start_idx(true, 10, 0, 8), 2);
  EXPECT_EQ(compute_slot_mapping_start_idx(false, 10, 0, 8), 0);
  EXPECT_EQ(compute_slot_mapping_start_idx(true, 10, 0, std::nullopt), 0);
  EXPECT_EQ(compute_slot_mapping_start_idx(true, 5, 0, 8), 0);
  std::vector<int64_t> out(10);
  const std::vector<int32_t> table = {0, 1, 0};
  compute_slot_mapping(false, out, 10, 0, 2, 4, table);
  EXPECT_EQ(Vec(out.begin(), out.end()), (Vec{-1, -1, 2, 3, 4, 5, 6, 7, 0, 1}));
  compute_slot_mapping(true, out, 10, 0, 0, 4, {});
  EXPECT_EQ(Vec(out.begin(), out.end()), Vec(10, -1));
  expect_error<ValueError>([&] { compute_slot_mapping(false, out, 10, 0, 0, 4, std::span(table).first(2)); },
                           {"block_table has 2 entries", "needs 3"});
  std::vector<int64_t> short_out(3);
  expect_error<ValueError>([&] { compute_slot_mapping(false, short_out, 10, 0, 0, 4, table); },
                           {"argument 'out'", "10 entries, got 3"});
}

TEST(MetadataBuilder, SlidingWindowWithContextAndDecodes) {
  // start_idx = max(0, query_len - window) counts from the query (seed); with
  // context 2 and 10 new tokens at window 4: start_idx 6, PADs for
  // positions 2..5, real slots for 6..11.
  MetadataBuilderConfig c = config(4, 64);
  c.sliding_window = 4;
  const std::vector<RequestSpec> reqs = {{1, 9, {5, 6, 7}}, {10, 2, {0, 1, 2}}};
  const MlaMetadata m = MlaMetadataBuilder(c).build(reqs);
  // Decodes are not prompts: never padded. Position 9 -> block 7, offset 1.
  EXPECT_EQ(to_vec(m.slot_mapping_cpu), (Vec{29, -1, -1, -1, -1, 6, 7, 8, 9, 10, 11}));
}

TEST(MetadataBuilder, TV_PAD) {
  const std::vector<RequestSpec> reqs = {request(2, 0, 4), request(3, 1, 4, 5)};
  test::CommonMetadataArrays a = test::make_common(reqs, 4, 0, 8);
  const Vec slots = to_vec(a.common.slot_mapping);
  ASSERT_EQ(slots.size(), 8u);
  EXPECT_EQ(slots, (Vec{0, 1, 21, 22, 23, -1, -1, -1}));  // entries 0-4 unchanged
  // A slot mapping shorter than num_actual_tokens is refused.
  std::vector<int64_t> tiny(3);
  Tensor t(tiny.data(), DType::i64, {3});
  expect_error<ValueError>(
      [&] {
        CommonAttentionMetadata(a.common.query_start_loc, a.common.query_start_loc_cpu, a.common.seq_lens,
                                a.common.seq_lens_cpu, a.common.num_computed_tokens_cpu, 2, 5, 3,
                                a.common.block_table_tensor, t);
      },
      {"slot_mapping", "at least num_actual_tokens = 5"});
}

TEST(MetadataBuilder, TV_BUILD) {
  // Seed: query_lens [5, 1, 1] (1 prefill, 2 decodes) -> max_query_len 5,
  // max_decode_query_len 1, query_start_loc [0, 5, 6, 7]; v1 order [1, 1, 5]:
  const std::vector<RequestSpec> reqs = {request(1, 4, 16), request(1, 9, 16, 1), request(5, 0, 16, 2)};
  const MlaMetadata m = MlaMetadataBuilder(config(16, 64)).build(reqs);
  EXPECT_EQ(m.max_query_len, 5);
  EXPECT_EQ(m.max_decode_query_len, 1);
  EXPECT_EQ(to_vec(m.query_start_loc_cpu), (Vec{0, 1, 2, 7}));
  EXPECT_EQ(m.num_decodes, 2);
  EXPECT_EQ(m.num_prefills, 1);
  EXPECT_EQ(m.num_decode_tokens, 2);
  EXPECT_EQ(m.num_prefill_tokens, 5);
  EXPECT_EQ(m.max_decode_seq_len, 10);
  EXPECT_EQ(m.max_prefill_seq_len, 5);
  EXPECT_FALSE(m.use_cuda_graph);

  // All-prefill batch: max_decode_query_len keeps its default 1, no decode view.
  const std::vector<RequestSpec> prefills = {request(5, 0, 16), request(7, 3, 16, 1)};
  const MlaMetadata p = MlaMetadataBuilder(config(16, 64)).build(prefills);
  EXPECT_EQ(p.max_decode_query_len, 1);
  EXPECT_EQ(p.max_decode_seq_len, 0);
  EXPECT_EQ(p.decode_metadata(), nullptr);
  EXPECT_EQ(p.num_decodes, 0);

  // query_lens [0] -> the seed's AssertionError text, exactly.
  const std::vector<RequestSpec> zero = {{0, 0, {0}}};
  try {
    MlaMetadataBuilder(config(16, 64)).build(zero);
    ADD_FAILURE() << "no exception";
  } catch (const AssertionError& e) {
    EXPECT_STREQ(e.what(), "query_lens: [0]");
  }
  const std::vector<RequestSpec> zeros = {{0, 0, {0}}, {-1, 0, {0}}};
  expect_error<AssertionError>([&] { MlaMetadataBuilder(config(16, 64)).build(zeros); }, {"query_lens: [0, -1]"});

  // Graph build: 6 decodes padded to 8 -> two -1 slots, num_decode_tokens 8.
  MetadataBuilderConfig g = config(16, 64);
  g.cudagraph = CudaGraphConfig{8, 64, 0, {}};
  std::vector<RequestSpec> decodes;
  for (int i = 0; i < 6; ++i) decodes.push_back(request(1, 3 * i, 16, i));
  BuildOptions options;
  options.cudagraph_batch_size = 8;
  const MlaMetadata gm = MlaMetadataBuilder(g).build(decodes, options);
  EXPECT_TRUE(gm.use_cuda_graph);
  EXPECT_EQ(gm.num_decode_tokens, 8);
  EXPECT_EQ(gm.num_actual_tokens, 6);
  EXPECT_EQ(gm.num_pad_reqs, 2);
  const Vec slots = to_vec(gm.slot_mapping_cpu);
  ASSERT_EQ(slots.size(), 8u);
  EXPECT_EQ(slots[6], PAD_SLOT_ID);
  EXPECT_EQ(slots[7], PAD_SLOT_ID);
  EXPECT_EQ(slots[5], 5 * 16 + 15);
}

// ---- views, storage, device --------------------------------------------------------

TEST(MetadataBuilder, ViewsSliceTheParentRows) {
  const std::vector<RequestSpec> reqs = {request(1, 7, 4, 0), request(2, 0, 4, 3), request(4, 5, 4, 10),
                                         request(3, 0, 4, 20)};
  MetadataBuilderConfig c = config(4, 64);
  c.reorder_batch_threshold = 2;  // query_len 2 is a (speculative) decode
  const MlaMetadata m = MlaMetadataBuilder(c).build(reqs);
  ASSERT_EQ(m.num_decodes, 2);
  ASSERT_EQ(m.num_prefills, 2);
  EXPECT_EQ(m.max_decode_query_len, 2);
  const DecodeMetadata& d = *m.decode;
  const PrefillMetadata& p = *m.prefill;
  EXPECT_EQ(d.num_decode_tokens, 3);
  EXPECT_EQ(p.num_prefill_tokens, 7);
  EXPECT_EQ(to_vec(d.seq_lens_cpu), (Vec{8, 2}));
  EXPECT_EQ(to_vec(p.seq_lens_cpu), (Vec{9, 3}));
  EXPECT_EQ(to_vec(p.context_lens_cpu), (Vec{5, 0}));
  EXPECT_EQ(to_vec(p.query_start_loc_cpu), (Vec{0, 4, 7}));
  EXPECT_EQ(to_rows(p.block_table_cpu), (Rows{{10, 11, 12}, {20, 0, 0}}));  // right-padded with 0
  EXPECT_EQ(to_rows(d.block_table_cpu), (Rows{{0, 1, 0}, {3, 0, 0}}));
  EXPECT_EQ(to_vec(d.slot_mapping_cpu), (Vec{7, 12, 13}));
  EXPECT_EQ(to_vec(p.slot_mapping_cpu), (Vec{45, 46, 47, 48, 80, 81, 82}));
  EXPECT_EQ(p.max_prefill_seq_len, 9);
  EXPECT_EQ(d.max_decode_seq_len, 8);
  EXPECT_EQ(p.block_size, 4);
  EXPECT_EQ(d.block_size, 4);
}

TEST(MetadataBuilder, CopiesShareStorageAndOutliveTheOriginal) {
  MlaMetadata copy;
  {
    const std::vector<RequestSpec> reqs = {request(1, 7, 4), request(3, 2, 4, 5)};
    MlaMetadata original = MlaMetadataBuilder(config(4, 64)).build(reqs);
    copy = original;
    EXPECT_EQ(copy.storage, original.storage);
  }
  EXPECT_EQ(to_vec(copy.seq_lens_cpu), (Vec{8, 5}));
  EXPECT_EQ(to_rows(copy.prefill->chunks.cu_seq_lens_cpu), (Rows{{0, 2}}));
}

TEST(MetadataBuilder, ToDeviceOnCpuAliasesHostViews) {
  const std::vector<RequestSpec> reqs = {request(1, 7, 4), request(3, 2, 4, 5)};
  MlaMetadata m = MlaMetadataBuilder(config(4, 64)).build(reqs);
  m.to_device(Device::cpu());
  EXPECT_EQ(m.device, Device::cpu());
  EXPECT_EQ(m.slot_mapping.data(), m.slot_mapping_cpu.data());
  EXPECT_EQ(m.prefill->chunks.starts.data(), m.prefill->chunks.starts_cpu.data());
  EXPECT_EQ(m.decode->block_table.data(), m.decode->block_table_cpu.data());
  if (!built_with_cuda()) {
    expect_error<ValueError>([&] { m.to_device(Device::cuda(0)); }, {"built without CUDA"});
  }
  MlaMetadata empty;
  expect_error<ValueError>([&] { empty.to_device(Device::cpu()); }, {"no storage"});
}

TEST(MetadataBuilder, BuildFromCommonMetadataMatchesRequestSpecs) {
  const std::vector<RequestSpec> reqs = {request(1, 7, 4), request(1, 0, 4, 3), request(6, 9, 4, 10)};
  test::CommonMetadataArrays a = test::make_common(reqs, 4, 8, 12);
  const MlaMetadataBuilder builder(config(4, 64));
  const MlaMetadata from_specs = builder.build(reqs);
  const MlaMetadata from_common = builder.build(a.common);
  EXPECT_EQ(to_vec(from_common.query_start_loc_cpu), to_vec(from_specs.query_start_loc_cpu));
  EXPECT_EQ(to_vec(from_common.seq_lens_cpu), to_vec(from_specs.seq_lens_cpu));
  EXPECT_EQ(to_vec(from_common.context_lens_cpu), to_vec(from_specs.context_lens_cpu));
  // The common metadata's slot mapping is taken with its PAD tail.
  Vec slots = to_vec(from_specs.slot_mapping_cpu);
  slots.resize(12, PAD_SLOT_ID);
  EXPECT_EQ(to_vec(from_common.slot_mapping_cpu), slots);
  EXPECT_EQ(from_common.num_actual_tokens, 8);
  EXPECT_EQ(from_common.block_table_cpu.size(1), 8);  // the runner's width
  EXPECT_EQ(to_rows(from_common.prefill->chunks.cu_seq_lens_cpu), to_rows(from_specs.prefill->chunks.cu_seq_lens_cpu));
  EXPECT_EQ(to_vec(from_common.prefill->slot_mapping_cpu), to_vec(from_specs.prefill->slot_mapping_cpu));
}

// ---- refusals -----------------------------------------------------------------------

TEST(MetadataBuilder, RefusesBadRequestsNamingIndexAndValues) {
  const MlaMetadataBuilder builder(config(4, 64));
  auto build = [&](std::vector<RequestSpec> reqs) { return builder.build(reqs); };
  expect_error<ValueError>(
      [&] {
        build({request(1, 0, 4), {0, 0, {1}}});
      },
      {"request 1 has query_len 0", "query_len > 0"});
  expect_error<ValueError>([&] { build({request(1, 0, 4), {-3, 0, {1}}}); }, {"request 1 has query_len -3"});
  expect_error<ValueError>([&] { build({{1, -2, {1}}}); }, {"request 0 has num_computed_tokens -2"});
  expect_error<ValueError>(
      [&] {
        build({request(1, 3, 4), {3, 6, {1, 2}}});
      },
      {"request 1 has a block table of 2 blocks", "seq_len 9", "needs 3"});
  expect_error<ValueError>([&] { build({{1, 0, {-1}}}); }, {"request 0 has block_table[0] = -1"});
  expect_error<ValueError>([&] { build({}); }, {"empty"});
  expect_error<AssertionError>(
      [&] {
        build({request(1, 0, 4), request(5, 0, 4, 2), request(1, 2, 4, 4)});
      },
      {"not reordered", "request 1 is a prefill (query_len 5", "request 2", "decode (query_len 1)"});
  expect_error<ValueError>([&] { build({{1, 2147483647, {0}}}); }, {"request 0 has seq_len 2147483648"});

  MetadataBuilderConfig bounded = config(4, 64);
  bounded.num_cache_blocks = 10;
  expect_error<ValueError>(
      [&] {
        MlaMetadataBuilder(bounded).build(std::vector<RequestSpec>{{5, 0, {3, 10}}});
      },
      {"request 0 has block_table[1] = 10", "[0, 10)"});
  // Entries past seq_len are not read and not checked.
  EXPECT_NO_THROW(MlaMetadataBuilder(bounded).build(std::vector<RequestSpec>{{4, 0, {3, 99}}}));

  MetadataBuilderConfig no_chunking = config(4, 0);
  no_chunking.chunked_prefill_enabled = false;
  expect_error<ValueError>(
      [&] {
        MlaMetadataBuilder(no_chunking).build(std::vector<RequestSpec>{{3, 4, {0, 1}}});
      },
      {"request 0 is a prefill with num_computed_tokens 4", "neither chunked_prefill_enabled"});
  // Decodes with context need no chunking.
  EXPECT_NO_THROW(MlaMetadataBuilder(no_chunking).build(std::vector<RequestSpec>{{1, 4, {0, 1}}}));
  MetadataBuilderConfig prefix_only = no_chunking;
  prefix_only.enable_prefix_caching = true;
  prefix_only.context_chunk_workspace_size = 8;
  EXPECT_EQ(MlaMetadataBuilder(prefix_only).build(std::vector<RequestSpec>{{3, 4, {0, 1}}}).prefill->chunks.num_chunks,
            1);
}

TEST(MetadataBuilder, RefusesBadCommonMetadata) {
  const std::vector<RequestSpec> reqs = {request(1, 7, 4), request(6, 9, 4, 10)};
  MetadataBuilderConfig c = config(4, 64);
  c.num_cache_blocks = 16;
  const MlaMetadataBuilder builder(c);
  {
    test::CommonMetadataArrays a = test::make_common(reqs, 4);
    a.seq_lens[1] = 99;
    expect_error<ValueError>([&] { builder.build(a.common); }, {"request 1 has seq_lens_cpu 99"});
  }
  {
    test::CommonMetadataArrays a = test::make_common(reqs, 4);
    a.slot_mapping[2] = 16 * 4;
    expect_error<ValueError>([&] { builder.build(a.common); }, {"slot_mapping[2] = 64", "[0, 64)"});
    a.slot_mapping[2] = -7;
    expect_error<ValueError>([&] { builder.build(a.common); }, {"slot_mapping[2] = -7"});
  }
  {
    test::CommonMetadataArrays a = test::make_common(reqs, 4);
    a.common.max_query_len = 3;
    expect_error<ValueError>([&] { builder.build(a.common); }, {"max_query_len 3", "6"});
  }
  {
    test::CommonMetadataArrays a = test::make_common(reqs, 4);
    a.common.block_table_tensor = Tensor();
    expect_error<ValueError>([&] { builder.build(a.common); }, {"block_table_tensor"});
  }
}

TEST(MetadataBuilder, RefusesBadConfiguration) {
  auto make = [](MetadataBuilderConfig c) { MlaMetadataBuilder b(c); };
  MetadataBuilderConfig c = config(0, 64);
  expect_error<ValueError>([&] { make(c); }, {"block_size must be > 0, got 0"});
  c = config(16, 0);
  expect_error<ValueError>([&] { make(c); }, {"context_chunk_workspace_size must be > 0"});
  c = config(16, 64);
  c.reorder_batch_threshold = 0;
  expect_error<ValueError>([&] { make(c); }, {"reorder_batch_threshold must be >= 1, got 0"});
  c = config(16, 64);
  c.sliding_window = 0;
  expect_error<ValueError>([&] { make(c); }, {"sliding_window must be > 0"});
  c = config(16, 64);
  c.head_dim = 512;
  try {
    make(c);
    ADD_FAILURE() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "Only [576] are supported for head_dim, received 512.");
  }
  c.head_dim = 576;
  EXPECT_NO_THROW(make(c));
  EXPECT_EQ(mla_supported_head_sizes(), std::vector<int>{576});
}

TEST(MetadataBuilder, ProfileRunPadsEverySlot) {
  const std::vector<RequestSpec> reqs = {{3, 0, {}}, {2, 0, {}}};
  BuildOptions options;
  options.is_profile_run = true;
  const MlaMetadata m = MlaMetadataBuilder(config(16, 64)).build(reqs, options);
  EXPECT_TRUE(m.is_profile_run);
  EXPECT_EQ(to_vec(m.slot_mapping_cpu), Vec(5, PAD_SLOT_ID));
  EXPECT_EQ(m.block_table_cpu.size(1), 0);
}

// ---- CUDA (skipped without a GPU) -------------------------------------------------

std::vector<int64_t> device_to_vec(const Tensor& t) {
  OwnedTensor host = OwnedTensor::empty(t.shape(), t.dtype());
  copy_tensor(t, host);
  return to_vec(host.tensor().dim() == 1 ? host.tensor() : host.tensor().view({-1}));
}

TEST(MetadataBuilder, ToDeviceCopiesEveryView) {
  if (query_cuda_devices().devices.empty()) GTEST_SKIP() << "no CUDA device";
  const std::vector<RequestSpec> reqs = {request(1, 7, 4), request(1, 30, 4, 9), request(5, 70, 4, 20),
                                         request(9, 0, 4, 60)};
  MlaMetadata m = MlaMetadataBuilder(config(4, 32)).build(reqs);
  m.to_device(Device::cuda(0));
  EXPECT_EQ(m.device, Device::cuda(0));
  auto same = [](const Tensor& host, const Tensor& dev) {
    EXPECT_TRUE(dev.device().is_cuda());
    EXPECT_NE(dev.data(), host.data());
    EXPECT_EQ(device_to_vec(dev), to_vec(host.dim() == 1 ? host : host.view({-1})));
  };
  same(m.query_start_loc_cpu, m.query_start_loc);
  same(m.seq_lens_cpu, m.seq_lens);
  same(m.context_lens_cpu, m.context_lens);
  same(m.block_table_cpu, m.block_table);
  same(m.slot_mapping_cpu, m.slot_mapping);
  same(m.decode->seq_lens_cpu, m.decode->seq_lens);
  same(m.decode->block_table_cpu, m.decode->block_table);
  same(m.prefill->query_start_loc_cpu, m.prefill->query_start_loc);
  same(m.prefill->block_table_cpu, m.prefill->block_table);
  ASSERT_GT(m.prefill->chunks.num_chunks, 1);
  same(m.prefill->chunks.starts_cpu, m.prefill->chunks.starts);
  same(m.prefill->chunks.cu_seq_lens_cpu, m.prefill->chunks.cu_seq_lens);
  const void* before = m.slot_mapping.data();
  m.to_device(Device::cuda(0));  // again: same device memory
  EXPECT_EQ(m.slot_mapping.data(), before);
}

TEST(MetadataBuilder, CudaGraphBuildsKeepDevicePointers) {
  if (query_cuda_devices().devices.empty()) GTEST_SKIP() << "no CUDA device";
  MetadataBuilderConfig c = config(4, 32);
  c.cudagraph = CudaGraphConfig{8, 64, 0, {}};
  const MlaMetadataBuilder builder(c);
  const std::vector<RequestSpec> first = {request(1, 7, 4), request(1, 30, 4, 9), request(1, 3, 4, 20)};
  MlaMetadata a = builder.build_for_cudagraph(first);
  a.to_device(Device::cuda(0));
  const std::vector<RequestSpec> second = {request(1, 50, 4, 30), request(1, 1, 4, 60)};
  MlaMetadata b = builder.build_for_cudagraph(second);
  b.to_device(Device::cuda(0));
  EXPECT_EQ(a.num_reqs, 4);  // padded to the captured size 4
  EXPECT_EQ(b.num_reqs, 2);
  EXPECT_EQ(a.slot_mapping.data(), b.slot_mapping.data());
  EXPECT_EQ(a.seq_lens.data(), b.seq_lens.data());
  EXPECT_EQ(a.block_table.data(), b.block_table.data());
  EXPECT_EQ(device_to_vec(b.seq_lens), (Vec{51, 2}));
  EXPECT_EQ(device_to_vec(b.slot_mapping), to_vec(b.slot_mapping_cpu));
}

}  // namespace
}  // namespace lattn

// The one list of (X_cpu, X) pairs (core/metadata/view_pairs.h) covers every
// index array of a step with decodes and prefills with context, binds the
// device views (on the CPU: the host views), and is what a device view is
// checked against.
namespace lattn {
namespace {

TEST(MetadataViewPairs, EveryIndexArrayIsOnePairOfTheList) {
  const int bs = 4;
  const std::vector<RequestSpec> reqs = {request(1, 5, bs), request(1, 0, bs, 2), request(3, 9, bs, 3),
                                         request(2, 0, bs, 7)};
  MlaMetadata md = MlaMetadataBuilder(config(bs, 64)).build(reqs);
  ASSERT_TRUE(md.decode && md.prefill && md.prefill->has_context());
  md.to_device(Device::cpu());
  const std::vector<detail::ConstViewPair> pairs = detail::view_pairs(std::as_const(md));
  ASSERT_EQ(pairs.size(), 19u);
  std::set<std::string> names;
  std::set<const Tensor*> hosts;
  for (const detail::ConstViewPair& p : pairs) {
    SCOPED_TRACE(p.name);
    EXPECT_TRUE(names.insert(p.name).second);
    EXPECT_TRUE(hosts.insert(p.host).second);
    ASSERT_TRUE(p.host->defined());
    EXPECT_TRUE(p.host->device().is_cpu());
    EXPECT_EQ(p.device->data(), p.host->data());  // on the CPU the device view is the host view
    EXPECT_NO_THROW(detail::check_view_pair("test", p, Device::cpu()));
  }
  // Every Tensor member of the three structs that has a host twin is in the list.
  for (const Tensor* t :
       {&md.query_start_loc_cpu, &md.seq_start_loc_cpu, &md.seq_lens_cpu, &md.context_lens_cpu, &md.block_table_cpu,
        &md.slot_mapping_cpu, &md.decode->query_start_loc_cpu, &md.decode->seq_lens_cpu, &md.decode->seq_start_loc_cpu,
        &md.decode->block_table_cpu, &md.decode->slot_mapping_cpu, &md.prefill->query_start_loc_cpu,
        &md.prefill->seq_lens_cpu, &md.prefill->context_lens_cpu, &md.prefill->seq_start_loc_cpu,
        &md.prefill->block_table_cpu, &md.prefill->slot_mapping_cpu, &md.prefill->chunks.starts_cpu,
        &md.prefill->chunks.cu_seq_lens_cpu}) {
    EXPECT_EQ(hosts.count(t), 1u);
  }
  // A decode-only step lists the common and decode pairs only.
  const std::vector<RequestSpec> two_decodes = {request(1, 5, bs), request(1, 0, bs, 2)};
  const MlaMetadata decodes = MlaMetadataBuilder(config(bs, 64)).build(two_decodes);
  EXPECT_EQ(detail::view_pairs(decodes).size(), 11u);
}

TEST(MetadataViewPairs, ADeviceViewThatIsNotTheHostViewsTwinIsRefused) {
  const int bs = 4;
  const std::vector<RequestSpec> reqs = {request(1, 5, bs), request(3, 2, bs, 2)};
  MlaMetadata md = MlaMetadataBuilder(config(bs, 64)).build(reqs);
  md.to_device(Device::cpu());
  const Tensor host = md.seq_lens_cpu;
  const Tensor shorter = host.narrow(0, 0, 1);
  expect_error<ValueError>(
      [&] {
        detail::check_view_pair("op", {"metadata.seq_lens", &host, &shorter}, Device::cpu());
      },
      {"op: argument 'metadata.seq_lens (device copy)'", "shape [2]", "[1]"});
  const Tensor undefined;
  expect_error<ValueError>(
      [&] {
        detail::check_view_pair("op", {"metadata.seq_lens", &host, &undefined}, Device::cpu());
      },
      {"metadata.seq_lens (device copy)"});
  expect_error<ValueError>(
      [&] {
        detail::check_view_pair("op", {"metadata.seq_lens", &host, &host}, Device::cuda(0));
      },
      {"metadata.seq_lens (device copy)", "cuda:0"});
}

}  // namespace
}  // namespace lattn
