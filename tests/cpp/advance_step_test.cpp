// advance_step: the seed's vector (TV_ADVANCE) with a CUDA-graph padded row,
// every assertion of docs/metadata.md, the prefill -> decode conversion, "nothing
// written on refusal", and agreement with a fresh build over many steps.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "lattn/advance_step.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "support/metadata_test_util.h"

namespace lattn {
namespace {

using test::to_vec;
using Vec = std::vector<int64_t>;

struct StepTensors {
  std::vector<int64_t> sampled, tokens, positions;
  Tensor sampled_t, tokens_t, positions_t;
  StepTensors(std::vector<int64_t> s, int num_seqs)
      : sampled(std::move(s)), tokens(size_t(num_seqs), -5), positions(size_t(num_seqs), -5) {
    sampled_t = Tensor(sampled.data(), DType::i64, {int64_t(sampled.size())});
    tokens_t = Tensor(tokens.data(), DType::i64, {num_seqs});
    positions_t = Tensor(positions.data(), DType::i64, {num_seqs});
  }
};

MlaMetadataBuilder graph_builder(int block_size) {
  MetadataBuilderConfig c;
  c.block_size = block_size;
  c.context_chunk_workspace_size = 64;
  c.cudagraph = CudaGraphConfig{8, 16, 0, {1, 2, 4, 8}};
  return MlaMetadataBuilder(c);
}

// The seed vector: seq_lens [5, 8, 3, 1] with row 3 padding.
MlaMetadata tv_advance_metadata(const MlaMetadataBuilder& builder) {
  const std::vector<RequestSpec> reqs = {{1, 4, {10, 11}}, {1, 7, {20, 21, 22}}, {1, 2, {30}}};
  return builder.build_for_cudagraph(reqs);  // 3 requests -> captured size 4
}

template <class F>
std::string assertion_text(F&& f) {
  try {
    f();
  } catch (const AssertionError& e) {
    return e.what();
  }
  return "(no AssertionError)";
}

TEST(AdvanceStep, TV_ADVANCE) {
  const MlaMetadataBuilder builder = graph_builder(4);
  MlaMetadata m = tv_advance_metadata(builder);
  ASSERT_EQ(m.num_reqs, 4);
  ASSERT_EQ(m.num_pad_reqs, 1);
  ASSERT_EQ(to_vec(m.seq_lens_cpu), (Vec{5, 8, 3, 1}));
  StepTensors t({7, 8, 9}, 4);
  advance_step(m, t.sampled_t, t.tokens_t, t.positions_t, 4, 4, 3);
  EXPECT_EQ(to_vec(m.seq_lens_cpu), (Vec{6, 9, 4, 1}));
  EXPECT_EQ(m.max_decode_seq_len, 9);
  EXPECT_EQ(m.decode->max_decode_seq_len, 9);
  EXPECT_EQ(t.tokens, (Vec{7, 8, 9, 0}));
  EXPECT_EQ(t.positions, (Vec{5, 8, 3, 0}));
  EXPECT_EQ(to_vec(m.slot_mapping_cpu), (Vec{45, 88, 123, -1}));  // 11*4+1, 22*4+0, 30*4+3, PAD
  EXPECT_EQ(to_vec(m.decode->slot_mapping_cpu), (Vec{45, 88, 123, -1}));
  EXPECT_EQ(to_vec(m.context_lens_cpu), (Vec{5, 8, 3, 0}));
  EXPECT_EQ(to_vec(m.query_start_loc_cpu), (Vec{0, 1, 2, 3, 4}));
  EXPECT_EQ(to_vec(m.seq_start_loc_cpu), (Vec{0, 6, 15, 19, 20}));

  // num_seqs < num_queries.
  StepTensors more({1, 2, 3, 4, 5}, 5);
  EXPECT_EQ(assertion_text([&] { advance_step(m, more.sampled_t, more.tokens_t, more.positions_t, 4, 4, 5); }),
            "num_seqs > num_queries (num_seqs=4, num_queries=5)");
  // [n, 1] sampled ids are accepted.
  std::vector<int64_t> column = {1, 2, 3};
  Tensor column_t(column.data(), DType::i64, {3, 1});
  EXPECT_NO_THROW(advance_step(m, column_t, t.tokens_t, t.positions_t, 4, 4, 3));
  EXPECT_EQ(to_vec(m.seq_lens_cpu), (Vec{7, 10, 5, 1}));
}

TEST(AdvanceStep, EverySeedAssertion) {
  const MlaMetadataBuilder builder = graph_builder(4);
  StepTensors t({7, 8, 9}, 4);
  auto fails = [&](MlaMetadata m, int num_seqs, int num_queries, bool turn = false) {
    return assertion_text(
        [&] { advance_step(m, t.sampled_t, t.tokens_t, t.positions_t, 4, num_seqs, num_queries, turn); });
  };
  MlaMetadata m = tv_advance_metadata(builder);
  {
    MlaMetadata bad = m;
    bad.max_decode_seq_len = 7;
    EXPECT_EQ(fails(bad, 4, 3),
              "self.max_decode_seq_len == max(self.seq_lens) (max_decode_seq_len=7, max(seq_lens)=8)");
  }
  {
    MlaMetadata bad = m;
    bad.num_prefills = 1;
    EXPECT_EQ(fails(bad, 4, 3), "self.num_prefills == 0 (num_prefills=1)");
    bad.num_prefills = 0;
    bad.num_prefill_tokens = 2;
    EXPECT_EQ(fails(bad, 4, 3), "self.num_prefill_tokens == 0 (num_prefill_tokens=2)");
  }
  EXPECT_EQ(fails(m, 5, 3), "self.num_decode_tokens == num_seqs (num_decode_tokens=4, num_seqs=5)");
  {
    MlaMetadata bad = m;
    bad.slot_mapping_cpu = bad.slot_mapping_cpu.narrow(0, 0, 3);
    EXPECT_EQ(fails(bad, 4, 3), "self.slot_mapping.shape == (4, ) (slot_mapping.shape=(3, ))");
  }
  {
    MlaMetadata bad = m;
    bad.seq_lens_cpu = bad.seq_lens_cpu.narrow(0, 0, 3);
    bad.max_decode_seq_len = 8;
    EXPECT_EQ(fails(bad, 4, 3), "len(self.seq_lens) == num_seqs (len(seq_lens)=3, num_seqs=4)");
  }
  {
    MlaMetadata bad = m;
    bad.seq_lens = bad.seq_lens.narrow(0, 0, 2);
    EXPECT_EQ(fails(bad, 4, 3), "self.seq_lens_tensor.shape == (4, ) (seq_lens_tensor.shape=(2, ))");
  }
  {
    MlaMetadata bad = m;
    bad.max_query_len = 2;
    EXPECT_EQ(fails(bad, 4, 3), "self.max_query_len == 1 (max_query_len=2)");
    bad.max_query_len = 1;
    bad.max_prefill_seq_len = 3;
    EXPECT_EQ(fails(bad, 4, 3), "self.max_prefill_seq_len == 0 (max_prefill_seq_len=3)");
  }
  EXPECT_NE(fails(m, 4, 2).find("self.query_start_loc.shape == (3, )"), std::string::npos) << fails(m, 4, 2);
  {
    MlaMetadata bad = m;
    bad.seq_start_loc_cpu = bad.seq_start_loc_cpu.narrow(0, 0, 4);
    EXPECT_EQ(fails(bad, 4, 3), "self.seq_start_loc.shape == (5, ) (seq_start_loc.shape=(4, ))");
  }
  {
    MlaMetadata bad = m;
    bad.context_lens_cpu = bad.context_lens_cpu.narrow(0, 0, 3);
    EXPECT_NE(fails(bad, 4, 3).find("self.context_lens_tensor.shape == (3, )"), std::string::npos);
  }
  {
    MlaMetadata bad = m;
    bad.block_table_cpu = bad.block_table_cpu.narrow(0, 0, 3);
    EXPECT_EQ(fails(bad, 4, 3), "self.block_tables.shape[0] == num_seqs (block_tables.shape[0]=3, num_seqs=4)");
  }
  // turn_prefills_into_decodes on a batch whose decodes have 2 tokens.
  MetadataBuilderConfig c;
  c.block_size = 4;
  c.context_chunk_workspace_size = 64;
  c.reorder_batch_threshold = 2;
  const std::vector<RequestSpec> spec = {{2, 3, {1, 2}}, {5, 0, {3, 4}}};
  const MlaMetadata mixed = MlaMetadataBuilder(c).build(spec);
  EXPECT_EQ(fails(mixed, 2, 2, true),
            "self.num_decode_tokens + self.num_prefills == num_seqs (num_decode_tokens=2, num_prefills=1, num_seqs=2)");
}

TEST(AdvanceStep, RefusalWritesNothing) {
  const MlaMetadataBuilder builder = graph_builder(4);
  MlaMetadata m = tv_advance_metadata(builder);
  const Vec seq_before = to_vec(m.seq_lens_cpu), slots_before = to_vec(m.slot_mapping_cpu);
  StepTensors t({7, 8, 9}, 4);
  EXPECT_THROW(advance_step(m, t.sampled_t, t.tokens_t, t.positions_t, 8, 4, 3), ValueError);  // wrong block_size
  std::vector<int64_t> short_sampled = {1, 2};
  Tensor short_t(short_sampled.data(), DType::i64, {2});
  EXPECT_THROW(advance_step(m, short_t, t.tokens_t, t.positions_t, 4, 4, 3), ValueError);
  std::vector<int32_t> wrong_dtype(4);
  Tensor i32(wrong_dtype.data(), DType::i32, {4});
  EXPECT_THROW(advance_step(m, t.sampled_t, i32, t.positions_t, 4, 4, 3), ValueError);
  EXPECT_EQ(to_vec(m.seq_lens_cpu), seq_before);
  EXPECT_EQ(to_vec(m.slot_mapping_cpu), slots_before);
  EXPECT_EQ(t.tokens, Vec(4, -5));

  // A position past the block table: request 0 at seq_len 8 with 2 blocks of 4.
  const std::vector<RequestSpec> full = {{1, 7, {10, 11}}};
  MetadataBuilderConfig c;
  c.block_size = 4;
  c.context_chunk_workspace_size = 64;
  MlaMetadata f = MlaMetadataBuilder(c).build(full);
  StepTensors one({3}, 1);
  try {
    advance_step(f, one.sampled_t, one.tokens_t, one.positions_t, 4, 1, 1);
    ADD_FAILURE() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("request 0 writes position 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(to_vec(f.seq_lens_cpu), (Vec{8}));
}

TEST(AdvanceStep, TurnPrefillsIntoDecodes) {
  MetadataBuilderConfig c;
  c.block_size = 4;
  c.context_chunk_workspace_size = 64;
  // [2 decodes | 2 prefills]; after the first multi-step step all are decodes.
  const std::vector<RequestSpec> spec = {{1, 3, {1, 9}}, {1, 8, {2, 3, 4}}, {5, 2, {5, 6}}, {3, 0, {7}}};
  MlaMetadata m = MlaMetadataBuilder(c).build(spec);
  ASSERT_EQ(m.num_prefills, 2);
  StepTensors t({11, 12, 13, 14}, 4);
  advance_step(m, t.sampled_t, t.tokens_t, t.positions_t, 4, 4, 4, true);
  EXPECT_EQ(m.num_prefills, 0);
  EXPECT_EQ(m.num_decodes, 4);
  EXPECT_EQ(m.num_decode_tokens, 4);
  EXPECT_EQ(m.max_query_len, 1);
  EXPECT_EQ(m.prefill_metadata(), nullptr);
  ASSERT_NE(m.decode_metadata(), nullptr);
  EXPECT_EQ(m.decode->num_decodes, 4);
  EXPECT_EQ(to_vec(m.seq_lens_cpu), (Vec{5, 10, 8, 4}));
  EXPECT_EQ(t.positions, (Vec{4, 9, 7, 3}));
  // Slots of positions 4, 9, 7, 3 (the block of each new position is already in its row).
  EXPECT_EQ(to_vec(m.slot_mapping_cpu), (Vec{9 * 4 + 0, 4 * 4 + 1, 6 * 4 + 3, 7 * 4 + 3}));
  EXPECT_EQ(to_vec(m.decode->slot_mapping_cpu), to_vec(m.slot_mapping_cpu));
  EXPECT_EQ(t.tokens, (Vec{11, 12, 13, 14}));
  EXPECT_EQ(to_vec(m.query_start_loc_cpu), (Vec{0, 1, 2, 3, 4}));
  EXPECT_EQ(m.max_decode_seq_len, 10);
}

TEST(AdvanceStep, ManyStepsMatchFreshBuilds) {
  std::mt19937_64 rng(4242);
  for (int iter = 0; iter < 200; ++iter) {
    const int block_size = std::uniform_int_distribution<int>(1, 8)(rng);
    const int n = std::uniform_int_distribution<int>(1, 10)(rng);
    const int steps = 6;
    std::vector<RequestSpec> reqs;
    for (int i = 0; i < n; ++i) {
      const int ctx = std::uniform_int_distribution<int>(0, 30)(rng);
      std::vector<int32_t> table(size_t((ctx + 1 + steps + block_size - 1) / block_size));
      for (int32_t& b : table) b = std::uniform_int_distribution<int>(0, 500)(rng);
      reqs.push_back({1, ctx, table});
    }
    MetadataBuilderConfig c;
    c.block_size = block_size;
    c.context_chunk_workspace_size = 64;
    const MlaMetadataBuilder builder(c);
    MlaMetadata m = builder.build(reqs);
    for (int step = 0; step < steps - 1; ++step) {
      std::vector<int64_t> sampled(static_cast<size_t>(n));
      for (int64_t& s : sampled) s = std::uniform_int_distribution<int>(0, 32000)(rng);
      StepTensors t(sampled, n);
      advance_step(m, t.sampled_t, t.tokens_t, t.positions_t, block_size, n, n);
      for (RequestSpec& r : reqs) ++r.num_computed_tokens;
      const MlaMetadata fresh = builder.build(reqs);
      ASSERT_EQ(to_vec(m.seq_lens_cpu), to_vec(fresh.seq_lens_cpu));
      ASSERT_EQ(to_vec(m.slot_mapping_cpu), to_vec(fresh.slot_mapping_cpu));
      ASSERT_EQ(to_vec(m.context_lens_cpu), to_vec(fresh.context_lens_cpu));
      ASSERT_EQ(to_vec(m.query_start_loc_cpu), to_vec(fresh.query_start_loc_cpu));
      ASSERT_EQ(to_vec(m.seq_start_loc_cpu), to_vec(fresh.seq_start_loc_cpu));
      ASSERT_EQ(m.max_decode_seq_len, fresh.max_decode_seq_len);
      ASSERT_EQ(t.tokens, sampled);
      for (int i = 0; i < n; ++i) ASSERT_EQ(t.positions[size_t(i)], reqs[size_t(i)].num_computed_tokens);
    }
  }
}

TEST(AdvanceStep, DeviceMetadataIsUpdatedInPlace) {
  if (query_cuda_devices().devices.empty()) GTEST_SKIP() << "no CUDA device";
  const MlaMetadataBuilder builder = graph_builder(4);
  MlaMetadata m = tv_advance_metadata(builder);
  m.to_device(Device::cuda(0));
  const void* slots_before = m.slot_mapping.data();
  const Device gpu = Device::cuda(0);
  std::vector<int64_t> sampled = {7, 8, 9};
  OwnedTensor sampled_d = OwnedTensor::empty({3}, DType::i64, gpu);
  copy_tensor(Tensor(sampled.data(), DType::i64, {3}), sampled_d);
  OwnedTensor tokens_d = OwnedTensor::zeros({4}, DType::i64, gpu);
  OwnedTensor positions_d = OwnedTensor::zeros({4}, DType::i64, gpu);
  advance_step(m, sampled_d, tokens_d, positions_d, 4, 4, 3);
  EXPECT_EQ(m.slot_mapping.data(), slots_before);  // same device memory
  auto back = [](const Tensor& t) {
    OwnedTensor host = OwnedTensor::empty(t.shape(), t.dtype());
    copy_tensor(t, host);
    return to_vec(host.tensor());
  };
  EXPECT_EQ(back(m.slot_mapping), (Vec{45, 88, 123, -1}));
  EXPECT_EQ(back(m.seq_lens), (Vec{6, 9, 4, 1}));
  EXPECT_EQ(back(m.decode->seq_lens), (Vec{6, 9, 4, 1}));
  EXPECT_EQ(back(tokens_d), (Vec{7, 8, 9, 0}));
  EXPECT_EQ(back(positions_d), (Vec{5, 8, 3, 0}));
}

}  // namespace
}  // namespace lattn
