// One plan per step (lattn/step_plans.h): every layer's backend instance that
// prepares the same step shares the plan the first one made; a new step (a
// new build, advance_step) gets new plans; metadata edited in place after a
// plan was made is planned afresh instead of served the stale plan.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "lattn/advance_step.h"
#include "lattn/backend.h"
#include "lattn/cache.h"
#include "lattn/metadata.h"
#include "lattn/registry.h"
#include "lattn/step_plans.h"
#include "support/test_data.h"

namespace lattn {
namespace {

constexpr int kBlockSize = 16, kHeads = 4, kL = 64, kR = 16;

MlaMetadata build_decodes(const std::vector<int>& contexts) {
  MetadataBuilderConfig config;
  config.block_size = kBlockSize;
  config.context_chunk_workspace_size = 4096;
  std::vector<RequestSpec> requests;
  int next_block = 0;
  for (int context : contexts) {
    std::vector<int32_t> table(size_t((context + 1 + kBlockSize - 1) / kBlockSize));
    for (int32_t& b : table) b = next_block++;
    requests.push_back({1, context, std::move(table)});
  }
  return MlaMetadataBuilder(config).build(requests);
}

std::unique_ptr<DecodeBackend> cpu_decode() {
  DecodeBackendParams p;
  p.num_heads = kHeads, p.scale = 0.125f, p.kv_lora_rank = kL, p.qk_rope_head_dim = kR;
  return mla_decode_backend_registry().get_class("cpu")->create(p);
}

TEST(StepPlans, MakesEachKeyOnceAndIdsAreUnique) {
  StepPlans a, b;
  EXPECT_NE(a.id(), b.id());
  int made = 0;
  auto make = [&] { return ++made; };
  const auto first = a.get_or_make<int>("k", make);
  const auto again = a.get_or_make<int>("k", make);
  EXPECT_EQ(first.get(), again.get());
  EXPECT_EQ(made, 1);
  a.get_or_make<int>("other", make);
  EXPECT_EQ(made, 2);
  EXPECT_EQ(a.size(), 2u);
  EXPECT_THROW(b.get_or_make<int>("k", []() -> int { throw std::runtime_error("no"); }), std::runtime_error);
  EXPECT_EQ(b.size(), 0u);  // a throwing make() stores nothing
}

TEST(StepPlans, EachBuildHasItsOwnAndCopiesShare) {
  const MlaMetadata m1 = build_decodes({40, 70}), m2 = build_decodes({40, 70});
  ASSERT_TRUE(m1.decode && m2.decode && m1.decode->plans && m2.decode->plans);
  EXPECT_NE(m1.decode->plans->id(), m2.decode->plans->id());
  const MlaMetadata copy = m1;
  EXPECT_EQ(copy.decode->plans.get(), m1.decode->plans.get());
}

TEST(StepPlans, AdvanceStepStartsANewStep) {
  MlaMetadata m = build_decodes({40, 70});
  const uint64_t before = m.decode->plans->id();
  OwnedTensor sampled = OwnedTensor::zeros({2}, DType::i64), tokens = OwnedTensor::zeros({2}, DType::i64),
              positions = OwnedTensor::zeros({2}, DType::i64);
  advance_step(m, sampled, tokens, positions, kBlockSize, 2, 2);
  EXPECT_NE(m.decode->plans->id(), before);
}

// Decode inputs for `tokens` rows on a cache of `blocks` blocks.
struct DecodeData {
  OwnedLatentCache cache;
  OwnedTensor ql, qpe;
  DecodeData(int tokens, int blocks, uint64_t seed)
      : cache(blocks, kBlockSize, MlaDims{kHeads, kL, 32, kR, 32}, DType::bf16),
        ql(OwnedTensor::empty({tokens, kHeads, kL}, DType::bf16)),
        qpe(OwnedTensor::empty({tokens, kHeads, kR}, DType::bf16)) {
    std::mt19937_64 rng(seed);
    test::fill_uniform(cache.cache().data, rng);
    test::fill_uniform(ql, rng);
    test::fill_uniform(qpe, rng);
  }
  OwnedTensor run(DecodeBackend& backend, const DecodeMetadata& md, bool prepare) {
    OwnedTensor out = OwnedTensor::empty({md.num_decode_tokens, kHeads, kL}, DType::bf16);
    test::poison(out);
    if (prepare) backend.prepare_metadata(md);
    backend.run(ql, qpe, cache, md, out, Tensor());
    return out;
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(StepPlans, CpuDecodeLayersShareOnePlanPerStep) {
  const MlaMetadata m = build_decodes({300, 1000, 37, 2000});
  DecodeData data(4, 256, 1);
  std::vector<std::unique_ptr<DecodeBackend>> layers;
  for (int l = 0; l < 5; ++l) layers.push_back(cpu_decode());
  std::vector<OwnedTensor> outs;
  for (auto& layer : layers) outs.push_back(data.run(*layer, *m.decode, true));
  EXPECT_EQ(m.decode->plans->size(), 1u);  // five layers, one plan
  for (size_t l = 1; l < outs.size(); ++l) EXPECT_TRUE(same_bytes(outs[l], outs[0])) << "layer " << l;
  // A new step: a new plan.
  const MlaMetadata next = build_decodes({301, 1001, 38, 2001});
  for (auto& layer : layers) data.run(*layer, *next.decode, true);
  EXPECT_EQ(next.decode->plans->size(), 1u);
}

TEST(StepPlans, CpuDecodeReplansMetadataEditedInPlace) {
  // Plan for long sequences, then shorten them in place: the stale plan would
  // read keys past the new lengths; the run must equal a fresh step's.
  MlaMetadata edited = build_decodes({900, 1500});
  DecodeData data(2, 256, 2);
  auto layer = cpu_decode();
  layer->prepare_metadata(*edited.decode);
  int32_t* lens = edited.decode->seq_lens_cpu.data_as<int32_t>();
  lens[0] = 100, lens[1] = 60;
  const OwnedTensor got = data.run(*layer, *edited.decode, false);

  const MlaMetadata fresh = build_decodes({99, 59});
  MlaMetadata fresh_same_blocks = fresh;  // same lengths, the edited metadata's block table
  fresh_same_blocks.decode->block_table_cpu = edited.decode->block_table_cpu;
  fresh_same_blocks.decode->plans = std::make_shared<StepPlans>();
  auto other = cpu_decode();
  const OwnedTensor want = data.run(*other, *fresh_same_blocks.decode, true);
  EXPECT_TRUE(same_bytes(got, want));
}

}  // namespace
}  // namespace lattn
