// Decode context parallelism (lattn/dcp.h) with the in-process communicator:
// shard arithmetic, the collectives, and whole DCP decode steps (world sizes
// 1-4, one thread per rank, each with its own NaN-poisoned cache) against the
// same step on one rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "lattn/backend.h"
#include "lattn/cache.h"
#include "lattn/communicator.h"
#include "lattn/dcp.h"
#include "lattn/errors.h"
#include "lattn/ops.h"
#include "lattn/registry.h"
#include "support/dcp_ranks.h"
#include "support/test_data.h"

namespace lattn {
namespace {

using test::on_every_rank;

TEST(DcpShard, OwnersLocalPositionsAndCountsAgreeWithBruteForce) {
  for (int world = 1; world <= 4; ++world) {
    for (int interleave : {1, 2, 3, 16}) {
      for (int rank = 0; rank < world; ++rank) {
        const DcpConfig dcp{world, rank, interleave};
        int64_t next_local = 0;  // the owned positions, in order, get local positions 0, 1, 2, ...
        for (int64_t pos = 0; pos < 200; ++pos) {
          EXPECT_EQ(dcp_local_count(dcp, pos), next_local)
              << "world " << world << " il " << interleave << " pos " << pos;
          const int owner = int((pos / interleave) % world);
          EXPECT_EQ(dcp_owner(dcp, pos), owner);
          if (owner == rank) {
            EXPECT_EQ(dcp_local_position(dcp, pos), next_local);
            ++next_local;
          }
        }
      }
    }
  }
}

TEST(DcpShard, ConfigIsValidated) {
  EXPECT_THROW((DcpConfig{0, 0, 1}.validate()), ValueError);
  EXPECT_THROW((DcpConfig{2, 2, 1}.validate()), ValueError);
  EXPECT_THROW((DcpConfig{2, -1, 1}.validate()), ValueError);
  EXPECT_THROW((DcpConfig{2, 0, 0}.validate()), ValueError);
  try {
    DcpConfig{4, 7, 1}.validate();
    FAIL() << "rank 7 of 4 accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
  }
}

TEST(InProcessCommunicator, CollectivesMoveAndSumTheRightElements) {
  for (int world = 1; world <= 4; ++world) {
    auto comms = make_in_process_group(world);
    const int64_t m = 5;
    on_every_rank(world, [&](int r) {
      Communicator& c = *comms[size_t(r)];
      ASSERT_EQ(c.rank(), r);
      ASSERT_EQ(c.world_size(), world);
      // send[i] = 1000 r + i
      OwnedTensor send = OwnedTensor::empty({world * m}, DType::f32);
      for (int64_t i = 0; i < world * m; ++i) send.data_as<float>()[i] = float(1000 * r + i);
      OwnedTensor gathered = OwnedTensor::empty({world, world * m}, DType::f32);
      c.all_gather(send, gathered);
      for (int s = 0; s < world; ++s) {
        for (int64_t i = 0; i < world * m; ++i)
          EXPECT_EQ(gathered.data_as<float>()[s * world * m + i], float(1000 * s + i));
      }
      OwnedTensor reduced = OwnedTensor::empty({m}, DType::f32);
      c.reduce_scatter_sum(send, reduced);
      for (int64_t i = 0; i < m; ++i) {
        float want = 0;
        for (int s = 0; s < world; ++s) want += float(1000 * s + r * m + i);
        EXPECT_EQ(reduced.data_as<float>()[i], want);
      }
      OwnedTensor exchanged = OwnedTensor::empty({world * m}, DType::f32);
      c.all_to_all(send, exchanged);
      for (int s = 0; s < world; ++s) {
        for (int64_t i = 0; i < m; ++i) EXPECT_EQ(exchanged.data_as<float>()[s * m + i], float(1000 * s + r * m + i));
      }
      c.barrier();
    });
  }
}

TEST(InProcessCommunicator, MismatchedShapesAreRefusedOnEveryRank) {
  auto comms = make_in_process_group(2);
  std::vector<int> refused(2, 0);
  on_every_rank(2, [&](int r) {
    OwnedTensor send = OwnedTensor::empty({r == 0 ? 4 : 6}, DType::f32);
    OwnedTensor recv = OwnedTensor::empty({2 * (r == 0 ? 4 : 6)}, DType::f32);
    try {
      comms[size_t(r)]->all_gather(send, recv);
    } catch (const ValueError&) {
      refused[size_t(r)] = 1;
    }
  });
  EXPECT_EQ(refused, (std::vector<int>{1, 1}));
}

TEST(InProcessCommunicator, ArgumentsAreChecked) {
  auto comms = make_in_process_group(2);
  OwnedTensor send = OwnedTensor::empty({4}, DType::f32);
  OwnedTensor wrong = OwnedTensor::empty({5}, DType::f32);
  EXPECT_THROW(comms[0]->all_gather(send, wrong), ValueError);  // checked before the rendezvous
  OwnedTensor half = OwnedTensor::empty({8}, DType::f16);
  EXPECT_THROW(comms[0]->all_gather(send, half), ValueError);
  EXPECT_THROW(make_in_process_group(0), ValueError);
  if (!nccl_available()) {
    EXPECT_THROW(nccl_unique_id(), BackendUnavailableError);
  }
}

// ---------------------------------------------------------------------------
// Whole decode steps.

struct StepCase {
  int world = 1;
  int interleave = 1;
  int s_q = 1;
  bool head_slice = false;  // out = this rank's heads instead of every head
  DcpCombineMethod method = DcpCombineMethod::all_gather_reduce_scatter;
  DType cache_dtype = DType::bf16;
  std::string backend = "cpu";
};

constexpr int kHeads = 8, kL = 64, kR = 16, kBlock = 4;
const MlaDims kDims{kHeads, kL, 32, kR, 32};

struct StepResult {
  OwnedTensor out, lse;  // [T, Ho, L] bf16, [Ho, T] f32 per rank (rank-major vector)
};

// One decode step: `contexts[i]` cached tokens + s_q new ones for request i.
// Returns the single-rank result (index 0) and every rank's DCP result.
std::vector<StepResult> run_step(const StepCase& sc, const std::vector<int>& contexts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int reqs = int(contexts.size());
  const int tokens = reqs * sc.s_q;
  const float scale = 0.125f;
  const float cache_scale = sc.cache_dtype == DType::fp8_e4m3 ? 0.05f : 1.f;

  // Data every rank sees: cached context tokens, new tokens, queries.
  std::vector<OwnedTensor> ctx_kv, ctx_pe;
  for (int c : contexts) {
    ctx_kv.push_back(OwnedTensor::empty({std::max(c, 1), kL}, DType::bf16));
    ctx_pe.push_back(OwnedTensor::empty({std::max(c, 1), kR}, DType::bf16));
    test::fill_uniform(ctx_kv.back(), rng);
    test::fill_uniform(ctx_pe.back(), rng);
  }
  OwnedTensor new_kv = OwnedTensor::empty({tokens, kL}, DType::bf16),
              new_pe = OwnedTensor::empty({tokens, kR}, DType::bf16);
  OwnedTensor ql = OwnedTensor::empty({tokens, kHeads, kL}, DType::bf16);
  OwnedTensor qpe = OwnedTensor::empty({tokens, kHeads, kR}, DType::bf16);
  for (const Tensor* t : {&new_kv.tensor(), &new_pe.tensor(), &ql.tensor(), &qpe.tensor()}) test::fill_uniform(*t, rng);

  DecodeBackendParams params;
  params.num_heads = kHeads;
  params.scale = scale;
  params.kv_lora_rank = kL;
  params.qk_rope_head_dim = kR;
  params.dtype = DType::bf16;
  params.kv_cache_dtype = sc.cache_dtype;
  params.context.num_threads = 1;

  MetadataBuilderConfig bc;
  bc.block_size = kBlock;
  bc.reorder_batch_threshold = sc.s_q;
  bc.chunked_prefill_enabled = false;
  const MlaMetadataBuilder builder(bc);

  std::vector<test::RankRequest> rank_reqs;
  for (int i = 0; i < reqs; ++i) {
    rank_reqs.push_back(
        {contexts[size_t(i)], contexts[size_t(i)] + sc.s_q, &ctx_kv[size_t(i)].tensor(), &ctx_pe[size_t(i)].tensor()});
  }
  // One rank's cache (DcpConfig{1, 0, 1} = the single-rank run) and the step's requests over it.
  auto make_rank = [&](const DcpConfig& dcp, uint64_t rseed, std::vector<RequestSpec>& specs) {
    test::RankCache rc =
        test::make_rank_cache(dcp, rank_reqs, {kL, kR, sc.cache_dtype, kBlock, cache_scale}, Device::cpu(), rseed);
    for (int i = 0; i < reqs; ++i) {
      specs.push_back({.query_len = sc.s_q,
                       .num_computed_tokens = contexts[size_t(i)],
                       .block_table = std::move(rc.tables[size_t(i)])});
    }
    return std::move(rc.cache);
  };

  auto decode = [&](const LatentCache& cache, const MlaMetadata& md, const Tensor& out, const Tensor& lse) {
    concat_and_cache_mla(new_kv, new_pe, cache, md.slot_mapping_cpu.narrow(0, 0, tokens));
    auto backend = mla_decode_backend_registry().get_class(sc.backend)->create(params);
    backend->prepare_metadata(*md.decode_metadata());
    backend->run(ql, qpe, cache, *md.decode_metadata(), out, lse);
  };

  std::vector<StepResult> results(size_t(1 + sc.world));
  {  // The single-rank step: the ordinary metadata, causal by position.
    std::vector<RequestSpec> specs;
    auto cache = make_rank(DcpConfig{1, 0, 1}, seed + 1, specs);
    const MlaMetadata md = builder.build(specs);
    StepResult& r = results[0];
    r.out = OwnedTensor::empty({tokens, kHeads, kL}, DType::bf16);
    r.lse = OwnedTensor::empty({kHeads, tokens}, DType::f32);
    test::poison(r.out);
    test::poison(r.lse);
    decode(*cache, md, r.out, r.lse);
  }

  auto comms = make_in_process_group(sc.world);
  const int ho = sc.head_slice ? kHeads / sc.world : kHeads;
  on_every_rank(sc.world, [&](int rank) {
    const DcpConfig dcp{sc.world, rank, sc.interleave};
    std::vector<RequestSpec> specs;
    auto cache = make_rank(dcp, seed + 100 + uint64_t(rank), specs);
    const DcpDecodePlan plan = build_dcp_decode_metadata(builder, specs, dcp);
    OwnedTensor part = OwnedTensor::empty({tokens, kHeads, kL}, DType::bf16);
    OwnedTensor part_lse = OwnedTensor::empty({kHeads, tokens}, DType::f32);
    test::poison(part);
    test::poison(part_lse);
    decode(*cache, plan.metadata, part, part_lse);
    StepResult& r = results[size_t(1 + rank)];
    r.out = OwnedTensor::empty({tokens, ho, kL}, DType::bf16);
    r.lse = OwnedTensor::empty({ho, tokens}, DType::f32);
    test::poison(r.out);
    test::poison(r.lse);
    dcp_combine(*comms[size_t(rank)], plan, part, part_lse, r.out, r.lse, sc.method);
  });
  return results;
}

// The heads [h0, h0 + n) of a [T, H, D] / [H, T] result, as f32.
OwnedTensor heads_of(const Tensor& t, int h0, int n, bool lse_layout) {
  const Tensor v = lse_layout ? t.narrow(0, h0, n) : t.narrow(1, h0, n);
  return test::to_host_f32(v);
}

void expect_matches_single_rank(const StepCase& sc, const std::vector<int>& contexts, uint64_t seed) {
  const auto results = run_step(sc, contexts, seed);
  const StepResult& single = results[0];
  const int ho = sc.head_slice ? kHeads / sc.world : kHeads;
  for (int rank = 0; rank < sc.world; ++rank) {
    const int h0 = sc.head_slice ? rank * ho : 0;
    const OwnedTensor want = heads_of(single.out, h0, ho, false), want_lse = heads_of(single.lse, h0, ho, true);
    const test::ErrorReport eo = test::compare(results[size_t(1 + rank)].out, want);
    EXPECT_EQ(eo.nan_mismatches, 0) << eo.str();
    EXPECT_LE(eo.rel_l2, test::rel_tolerance(DType::bf16)) << "rank " << rank << ": " << eo.str();
    const test::ErrorReport el = test::compare(results[size_t(1 + rank)].lse, want_lse);
    EXPECT_EQ(el.nan_mismatches, 0) << el.str();
    EXPECT_LE(el.rel_l2, 1e-5) << "rank " << rank << " lse: " << el.str();
  }
}

// Contexts with short requests, so some ranks hold no key of some rows.
const std::vector<int> kContexts{0, 1, 2, 5, 37, 64, 130};

TEST(DcpDecode, WorldSizes1To4MatchOneRankAllGatherReduceScatter) {
  for (int world = 1; world <= 4; ++world) {
    for (int interleave : {1, 2}) {
      SCOPED_TRACE("world " + std::to_string(world) + " interleave " + std::to_string(interleave));
      expect_matches_single_rank({.world = world, .interleave = interleave}, kContexts, 10 + uint64_t(world));
    }
  }
}

TEST(DcpDecode, HeadSlicesAndAllToAllMatchOneRank) {
  for (int world : {2, 4}) {
    for (auto method : {DcpCombineMethod::all_gather_reduce_scatter, DcpCombineMethod::all_to_all}) {
      SCOPED_TRACE("world " + std::to_string(world) +
                   (method == DcpCombineMethod::all_to_all ? " all_to_all" : " ag+rs"));
      expect_matches_single_rank({.world = world, .head_slice = true, .method = method}, kContexts,
                                 20 + uint64_t(world));
    }
  }
}

TEST(DcpDecode, SeveralQueryTokensAreCausalByGlobalPosition) {
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    expect_matches_single_rank({.world = world, .interleave = 2, .s_q = 3}, kContexts, 30 + uint64_t(world));
  }
}

TEST(DcpDecode, Fp8CacheAndTheReferenceBackend) {
  expect_matches_single_rank({.world = 3, .cache_dtype = DType::fp8_e4m3}, kContexts, 41);
  expect_matches_single_rank({.world = 2, .backend = "reference"}, {0, 3, 17}, 42);
}

TEST(DcpDecode, WorldSizeOneIsBitIdenticalToOneRank) {
  const auto results = run_step({.world = 1}, kContexts, 50);
  EXPECT_EQ(std::memcmp(results[0].out.data(), results[1].out.data(), results[0].out.tensor().nbytes()), 0);
  EXPECT_EQ(std::memcmp(results[0].lse.data(), results[1].lse.data(), results[0].lse.tensor().nbytes()), 0);
}

TEST(DcpDecode, BothCombineMethodsGiveTheSameBits) {
  const StepCase a{.world = 4, .head_slice = true, .method = DcpCombineMethod::all_gather_reduce_scatter};
  StepCase b = a;
  b.method = DcpCombineMethod::all_to_all;
  const auto ra = run_step(a, kContexts, 60), rb = run_step(b, kContexts, 60);
  for (int rank = 0; rank < 4; ++rank) {
    const StepResult &x = ra[size_t(1 + rank)], &y = rb[size_t(1 + rank)];
    EXPECT_EQ(std::memcmp(x.out.data(), y.out.data(), x.out.tensor().nbytes()), 0) << "rank " << rank;
    EXPECT_EQ(std::memcmp(x.lse.data(), y.lse.data(), x.lse.tensor().nbytes()), 0) << "rank " << rank;
  }
}

TEST(DcpDecode, MetadataRefusesPrefillsAndShortTables) {
  MetadataBuilderConfig bc;
  bc.block_size = 4;
  bc.chunked_prefill_enabled = false;
  const MlaMetadataBuilder builder(bc);
  const DcpConfig dcp{2, 1, 1};
  EXPECT_THROW(
      build_dcp_decode_metadata(builder, {{.query_len = 5, .num_computed_tokens = 3, .block_table = {0, 1}}}, dcp),
      ValueError);
  // 40 tokens, 20 on rank 1: 5 local blocks of 4 needed.
  try {
    build_dcp_decode_metadata(builder, {{.query_len = 1, .num_computed_tokens = 39, .block_table = {0, 1, 2}}}, dcp);
    FAIL() << "a short block table was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("block_table"), std::string::npos) << e.what();
  }
}

TEST(DcpDecode, MetadataKeepsOnlyTheRanksTokens) {
  MetadataBuilderConfig bc;
  bc.block_size = 4;
  bc.reorder_batch_threshold = 4;
  bc.chunked_prefill_enabled = false;
  const MlaMetadataBuilder builder(bc);
  // Global positions 8..11 are new; world 2, interleave 1: rank 0 owns 8 and 10.
  const DcpDecodePlan plan = build_dcp_decode_metadata(
      builder, {{.query_len = 4, .num_computed_tokens = 8, .block_table = {7, 3}}}, DcpConfig{2, 0, 1});
  const MlaMetadata& md = plan.metadata;
  EXPECT_TRUE(plan.empty_rows.empty());
  ASSERT_EQ(md.num_decodes, 4);
  const auto* seq = md.seq_lens_cpu.data_as<const int32_t>();
  const auto* slot = md.slot_mapping_cpu.data_as<const int64_t>();
  // Visible local keys: positions <= 8 on rank 0 are 0,2,4,6,8 -> 5; <= 9 -> 5; <= 10 -> 6; <= 11 -> 6.
  EXPECT_EQ(std::vector<int32_t>(seq, seq + 4), (std::vector<int32_t>{5, 5, 6, 6}));
  // Position 8 -> local 4 -> block 3 offset 0 = slot 12; position 10 -> local 5 -> slot 13.
  EXPECT_EQ(std::vector<int64_t>(slot, slot + 4), (std::vector<int64_t>{12, PAD_SLOT_ID, 13, PAD_SLOT_ID}));

  // A first token (position 0) lives on rank 0 only: the other ranks see no key.
  for (int rank = 0; rank < 4; ++rank) {
    const DcpDecodePlan p =
        build_dcp_decode_metadata(builder,
                                  {{.query_len = 1, .num_computed_tokens = 0, .block_table = {1}},
                                   {.query_len = 1, .num_computed_tokens = 6, .block_table = {2, 5}}},
                                  DcpConfig{4, rank, 1});
    EXPECT_EQ(p.empty_rows, rank == 0 ? std::vector<int32_t>{} : std::vector<int32_t>{0}) << "rank " << rank;
  }
}

}  // namespace
}  // namespace lattn
