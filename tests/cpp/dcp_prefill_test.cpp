// DCP prefill with cached context (build_dcp_metadata + the DcpDecodePlan
// overload of MlaAttention::forward, docs/dcp.md): W ranks, one thread and one
// layer each, each rank's cache NaN-poisoned with permuted blocks and holding
// only its interleaved share of every request's context. Two steps per case:
//   1. a mixed batch (decodes first, then prefills with and without context),
//   2. one decode token per request over the caches step 1 wrote into,
// each compared with the same steps of one layer holding the whole cache
// (the single-rank result; bf16 bound). Outputs are poisoned before every
// step, so an unwritten row fails as a NaN mismatch. On the CPU with the
// in-process communicator (CI); on a GPU (when there is one) with the
// in-process group over device buffers and NCCL with world size 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <random>
#include <string>

#include "lattn/attention.h"
#include "lattn/cache.h"
#include "lattn/communicator.h"
#include "lattn/dcp.h"
#include "lattn/errors.h"
#include "lattn/ops.h"
#include "support/dcp_ranks.h"
#include "support/gpu.h"
#include "support/test_data.h"

namespace lattn {
namespace {

constexpr int kBlock = 4;

struct Req {
  int query_len;
  int context;
};

struct PrefillCase {
  int world = 2;
  int interleave = 1;
  std::vector<Req> reqs;
  MlaDims dims{8, 64, 16, 16, 32};
  DType cache_dtype = DType::bf16;
  DcpCombineMethod method = DcpCombineMethod::all_gather_reduce_scatter;
  int64_t workspace_rows = 4096;  // context rows gathered per chunk (small: several chunks)
  Device device = Device::cpu();
  bool nccl = false;  // NCCL (world 1) instead of the in-process group
};

// Decodes (1 token), then prefills of every kind: no context, context shorter
// than the world (empty shares), not divisible by the world, partial last blocks.
const std::vector<Req> kMixed{{1, 0}, {1, 37}, {1, 6}, {5, 0}, {7, 1}, {6, 2}, {9, 37}, {4, 64}, {2, 130}, {3, 11}};

struct StepInputs {
  OwnedTensor q, kv_c, k_pe;  // on the case's device
};

// results[step][0] = single rank, results[step][1 + r] = rank r; host bf16 [T, N*V].
using Results = std::array<std::vector<OwnedTensor>, 2>;

Results run_two_steps(const PrefillCase& pc, uint64_t seed) {
  const MlaDims& d = pc.dims;
  const int N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim, R = d.qk_rope_head_dim, V = d.v_head_dim;
  const int reqs = int(pc.reqs.size());
  const Device dev = pc.device;
  std::mt19937_64 rng(seed);
  auto host_rand = [&](std::initializer_list<int64_t> shape, float amp = 1.f) {
    OwnedTensor t = OwnedTensor::empty(shape, DType::bf16);
    test::fill_uniform(t, rng, -amp, amp);
    return t;
  };
  int tokens1 = 0;
  for (const Req& r : pc.reqs) tokens1 += r.query_len;
  std::vector<OwnedTensor> ctx_kv, ctx_pe;
  for (const Req& r : pc.reqs) {
    ctx_kv.push_back(test::to_device(host_rand({std::max(r.context, 1), L}), dev));
    ctx_pe.push_back(test::to_device(host_rand({std::max(r.context, 1), R}), dev));
  }
  // Room for both steps: the context, step 1's tokens and step 2's one.
  std::vector<test::RankRequest> rank_reqs;
  for (int i = 0; i < reqs; ++i) {
    const Req& r = pc.reqs[size_t(i)];
    rank_reqs.push_back(
        {r.context, r.context + r.query_len + 1, &ctx_kv[size_t(i)].tensor(), &ctx_pe[size_t(i)].tensor()});
  }
  std::array<StepInputs, 2> steps;
  for (int s = 0; s < 2; ++s) {
    const int T = s == 0 ? tokens1 : reqs;
    steps[size_t(s)] = {test::to_device(host_rand({T, N, P + R}), dev), test::to_device(host_rand({T, L}), dev),
                        test::to_device(host_rand({T, R}), dev)};
  }
  const OwnedTensor w = host_rand({int64_t(N) * (P + V), L}, 0.2f);

  MetadataBuilderConfig bc;
  bc.block_size = kBlock;
  bc.reorder_batch_threshold = 1;
  bc.chunked_prefill_enabled = true;
  bc.context_chunk_workspace_size = pc.workspace_rows;
  const MlaMetadataBuilder builder(bc);
  const KvCacheSpec spec{L, R, pc.cache_dtype, kBlock, pc.cache_dtype == DType::fp8_e4m3 ? 0.05f : 1.f};

  auto make_layer = [&] {
    MlaAttentionConfig c;
    c.dims = d;
    c.dtype = DType::bf16;
    c.kv_cache_dtype = pc.cache_dtype;
    c.device = dev;
    c.block_size = kBlock;
    auto layer = std::make_unique<MlaAttention>(c);
    layer->process_weights_after_loading(w);
    return layer;
  };
  auto specs_of = [&](int step, const std::vector<std::vector<int32_t>>& tables) {
    std::vector<RequestSpec> specs;
    for (int i = 0; i < reqs; ++i) {
      const Req& r = pc.reqs[size_t(i)];
      if (step == 0) {
        specs.push_back({.query_len = r.query_len, .num_computed_tokens = r.context, .block_table = tables[size_t(i)]});
      } else {
        specs.push_back(
            {.query_len = 1, .num_computed_tokens = r.context + r.query_len, .block_table = tables[size_t(i)]});
      }
    }
    return specs;
  };
  auto poisoned_out = [&](int step) {
    const int64_t T = steps[size_t(step)].q.tensor().size(0);
    OwnedTensor out = OwnedTensor::empty({T, int64_t(N) * V}, DType::bf16, dev);
    test::poison(out);
    return out;
  };

  Results results;
  for (auto& r : results) r.resize(size_t(1 + pc.world));
  {
    const test::RankCache rc = test::make_rank_cache(DcpConfig{}, rank_reqs, spec, dev, seed + 1);
    auto layer = make_layer();
    for (int s = 0; s < 2; ++s) {
      MlaMetadata md = builder.build(specs_of(s, rc.tables));
      if (dev.is_cuda()) md.to_device(dev);
      const StepInputs& in = steps[size_t(s)];
      OwnedTensor out = poisoned_out(s);
      layer->forward(in.q, in.kv_c, in.k_pe, *rc.cache, md, out);
      results[size_t(s)][0] = test::to_host(out);
    }
  }
  const auto comms = test::make_group(pc.world, dev, pc.nccl);
  test::on_every_rank(pc.world, [&](int r) {
    auto layer = make_layer();
    layer->set_dcp(comms[size_t(r)].get(), pc.interleave, pc.method);
    const DcpConfig dcp = layer->dcp_config();
    const test::RankCache rc = test::make_rank_cache(dcp, rank_reqs, spec, dev, seed + 100 + uint64_t(r));
    for (int s = 0; s < 2; ++s) {
      const DcpDecodePlan plan = build_dcp_metadata(builder, specs_of(s, rc.tables), dcp, dev);
      const StepInputs& in = steps[size_t(s)];
      OwnedTensor out = poisoned_out(s);
      // Step 1 twice: the second reuses the layer's scratch (its cache write is idempotent).
      for (int i = 0; i < (s == 0 ? 2 : 1); ++i) layer->forward(in.q, in.kv_c, in.k_pe, *rc.cache, plan, out);
      results[size_t(s)][size_t(1 + r)] = test::to_host(out);
    }
  });
  return results;
}

void expect_matches_one_rank(const PrefillCase& pc, uint64_t seed) {
  const Results results = run_two_steps(pc, seed);
  for (int s = 0; s < 2; ++s) {
    SCOPED_TRACE(s == 0 ? "step 1 (prefills with context)" : "step 2 (decode over step 1's cache writes)");
    test::expect_ranks_match_one_rank(results[size_t(s)], pc.world);
  }
}

std::string name(const PrefillCase& pc) {
  return "world " + std::to_string(pc.world) + " interleave " + std::to_string(pc.interleave) + " workspace " +
         std::to_string(pc.workspace_rows);
}

TEST(DcpPrefill, MixedBatchWorldSizes1To4MatchOneRank) {
  for (int world = 1; world <= 4; ++world) {
    for (int interleave : {1, 3}) {
      for (int64_t ws : {4096, 48}) {  // 48 rows: several context chunks per rank
        const PrefillCase pc{.world = world, .interleave = interleave, .reqs = kMixed, .workspace_rows = ws};
        SCOPED_TRACE(name(pc));
        expect_matches_one_rank(pc, 100 + uint64_t(world * 10 + interleave) + uint64_t(ws));
      }
    }
  }
}

TEST(DcpPrefill, EmptySharesAndNoContext) {
  for (int world : {2, 4}) {
    // One token of context: it lives on rank 0 alone, every other rank has an empty share.
    PrefillCase pc{.world = world, .reqs = {{6, 1}}};
    SCOPED_TRACE(name(pc) + " context 1");
    expect_matches_one_rank(pc, 200 + uint64_t(world));
    // Context shorter than the world, interleave 2: ranks past the context hold nothing.
    pc = {.world = world, .interleave = 2, .reqs = {{3, 3}, {5, 2}}};
    SCOPED_TRACE(name(pc) + " context < world");
    expect_matches_one_rank(pc, 210 + uint64_t(world));
    // No prefill has context: the new tokens alone, written on their owners only.
    pc = {.world = world, .reqs = {{1, 9}, {4, 0}, {7, 0}}};
    SCOPED_TRACE(name(pc) + " no prefill context");
    expect_matches_one_rank(pc, 220 + uint64_t(world));
  }
}

TEST(DcpPrefill, AllToAllOddHeadsFp8) {
  expect_matches_one_rank({.world = 4, .reqs = kMixed, .method = DcpCombineMethod::all_to_all}, 301);
  expect_matches_one_rank({.world = 2, .reqs = kMixed, .method = DcpCombineMethod::all_to_all, .workspace_rows = 48},
                          302);
  // 5 heads over 2 and 3 ranks: the whole-partial gather of the combine.
  expect_matches_one_rank({.world = 2, .reqs = kMixed, .dims = {5, 32, 16, 8, 24}}, 303);
  expect_matches_one_rank({.world = 3, .interleave = 2, .reqs = kMixed, .dims = {5, 32, 16, 8, 24}}, 304);
  expect_matches_one_rank({.world = 3, .reqs = kMixed, .cache_dtype = DType::fp8_e4m3, .workspace_rows = 48}, 305);
}

TEST(DcpPrefill, MetadataPlansTheRanksShareOfTheContext) {
  MetadataBuilderConfig bc;
  bc.block_size = 4;
  bc.reorder_batch_threshold = 1;
  bc.chunked_prefill_enabled = true;
  bc.context_chunk_workspace_size = 64;
  const MlaMetadataBuilder builder(bc);
  // World 2, interleave 1, context 7 (rank 0: positions 0,2,4,6; rank 1: 1,3,5),
  // new tokens at global positions 7..10: rank 0 owns 8 and 10, rank 1 owns 7 and 9.
  for (int rank = 0; rank < 2; ++rank) {
    const DcpDecodePlan plan = build_dcp_metadata(builder,
                                                  {{.query_len = 1, .num_computed_tokens = 2, .block_table = {9}},
                                                   {.query_len = 4, .num_computed_tokens = 7, .block_table = {5, 2}}},
                                                  DcpConfig{2, rank, 1});
    const MlaMetadata& md = plan.metadata;
    EXPECT_TRUE(plan.prefill_has_context);
    ASSERT_EQ(md.num_decodes, 1);
    ASSERT_EQ(md.num_prefills, 1);
    ASSERT_TRUE(md.prefill);
    const PrefillMetadata& pm = *md.prefill;
    EXPECT_EQ(pm.context_lens_cpu.data_as<const int32_t>()[0], rank == 0 ? 4 : 3) << "rank " << rank;
    ASSERT_EQ(pm.chunks.num_chunks, 1);
    EXPECT_EQ(pm.chunks.seq_tot[0], rank == 0 ? 4 : 3);
    const auto* slot = md.slot_mapping_cpu.data_as<const int64_t>();
    // Decode token at position 2 lives on rank 0 (local 1 -> block 9 offset 1).
    EXPECT_EQ(slot[0], rank == 0 ? 37 : PAD_SLOT_ID);
    // Rank 0: 8 -> local 4 (block 2, offset 0) = 8, 10 -> local 5 = 9;
    // rank 1: 7 -> local 3 (block 5, offset 3) = 23, 9 -> local 4 (block 2, offset 0) = 8.
    const std::vector<int64_t> want = rank == 0 ? std::vector<int64_t>{PAD_SLOT_ID, 8, PAD_SLOT_ID, 9}
                                                : std::vector<int64_t>{23, PAD_SLOT_ID, 8, PAD_SLOT_ID};
    EXPECT_EQ(std::vector<int64_t>(slot + 1, slot + 5), want) << "rank " << rank;
  }
  // No prefill context anywhere: no combine.
  const DcpDecodePlan none =
      build_dcp_metadata(builder, {{.query_len = 3, .num_computed_tokens = 0, .block_table = {1}}}, DcpConfig{4, 3, 1});
  EXPECT_FALSE(none.prefill_has_context);
  EXPECT_EQ(none.metadata.num_prefills, 1);
  // The local block table must hold the rank's tokens: 11 tokens, 6 on rank 0 need 2 blocks.
  try {
    build_dcp_metadata(builder, {{.query_len = 4, .num_computed_tokens = 7, .block_table = {5}}}, DcpConfig{2, 0, 1});
    FAIL() << "a short local block table was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("requests[0].block_table"), std::string::npos) << e.what();
  }
  // The decode-only planner still refuses prefills, naming build_dcp_metadata.
  try {
    build_dcp_decode_metadata(builder, {{.query_len = 4, .num_computed_tokens = 7, .block_table = {5, 2}}},
                              DcpConfig{2, 0, 1});
    FAIL() << "a prefill was accepted by build_dcp_decode_metadata";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("build_dcp_metadata"), std::string::npos) << e.what();
  }
}

TEST(DcpPrefillGpu, InProcessDeviceGroupAndNcclWorldOne) {
  LATTN_REQUIRE_GPU();
  const Device dev = Device::cuda(0);
  for (int world : {1, 2, 4}) {
    const PrefillCase pc{.world = world, .interleave = 3, .reqs = kMixed, .workspace_rows = 48, .device = dev};
    SCOPED_TRACE("gpu " + name(pc));
    expect_matches_one_rank(pc, 400 + uint64_t(world));
  }
  expect_matches_one_rank({.world = 2,
                           .reqs = kMixed,
                           .dims = {16, 512, 128, 64, 128},
                           .method = DcpCombineMethod::all_to_all,
                           .device = dev},
                          410);
  expect_matches_one_rank({.world = 4, .reqs = {{6, 1}, {3, 3}}, .device = dev}, 411);
  expect_matches_one_rank({.world = 3, .reqs = kMixed, .cache_dtype = DType::fp8_e4m3, .device = dev}, 412);
  if (nccl_available()) {
    expect_matches_one_rank({.world = 1, .reqs = kMixed, .device = dev, .nccl = true}, 413);
  } else {
    std::printf("NCCL not available: the NCCL world-1 prefill step did not run\n");
  }
}

}  // namespace
}  // namespace lattn
