// MlaAttention under decode context parallelism (set_dcp + the DcpDecodePlan
// overload of forward, docs/dcp.md): whole layer decode steps on W ranks (one
// thread and one layer each, each rank with its own NaN-poisoned cache with
// permuted blocks holding only its shard) against the same step on one rank.
// On the CPU with the in-process communicator (CI), world sizes 1-4; on a GPU
// (when there is one) with the in-process group over device buffers and NCCL
// with world size 1. World size 1 with s_q = 1 gives the single-rank bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

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

struct LayerCase {
  int world = 1;
  int interleave = 1;
  int s_q = 1;
  MlaDims dims{8, 64, 16, 16, 32};
  DType cache_dtype = DType::bf16;
  DcpCombineMethod method = DcpCombineMethod::all_gather_reduce_scatter;
  Device device = Device::cpu();
  bool nccl = false;  // NCCL (world 1) instead of the in-process group
};

constexpr int kBlock = 4;
const std::vector<int> kContexts{0, 1, 2, 5, 37, 64, 130};

// Returns the single-rank output (index 0) and every rank's output, as host bf16 [T, N*V].
std::vector<OwnedTensor> run_layer_step(const LayerCase& lc, const std::vector<int>& contexts, uint64_t seed) {
  const MlaDims& d = lc.dims;
  const int N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim, R = d.qk_rope_head_dim, V = d.v_head_dim;
  const int reqs = int(contexts.size()), tokens = reqs * lc.s_q;
  const Device dev = lc.device;
  std::mt19937_64 rng(seed);
  auto host_rand = [&](std::initializer_list<int64_t> shape, float amp = 1.f) {
    OwnedTensor t = OwnedTensor::empty(shape, DType::bf16);
    test::fill_uniform(t, rng, -amp, amp);
    return t;
  };
  std::vector<OwnedTensor> ctx_kv, ctx_pe;
  for (int c : contexts) {
    ctx_kv.push_back(host_rand({std::max(c, 1), L}));
    ctx_pe.push_back(host_rand({std::max(c, 1), R}));
  }
  const OwnedTensor q = test::to_device(host_rand({tokens, N, P + R}), dev),
                    kv_c = test::to_device(host_rand({tokens, L}), dev),
                    k_pe = test::to_device(host_rand({tokens, R}), dev);
  const OwnedTensor w = host_rand({int64_t(N) * (P + V), L}, 0.2f);
  std::vector<OwnedTensor> ctx_kv_dev, ctx_pe_dev;
  std::vector<test::RankRequest> rank_reqs;
  for (int i = 0; i < reqs; ++i) {
    ctx_kv_dev.push_back(test::to_device(ctx_kv[size_t(i)], dev));
    ctx_pe_dev.push_back(test::to_device(ctx_pe[size_t(i)], dev));
  }
  for (int i = 0; i < reqs; ++i) {  // after the pushes: the pointers stay valid
    rank_reqs.push_back({contexts[size_t(i)], contexts[size_t(i)] + lc.s_q, &ctx_kv_dev[size_t(i)].tensor(),
                         &ctx_pe_dev[size_t(i)].tensor()});
  }

  MetadataBuilderConfig bc;
  bc.block_size = kBlock;
  bc.reorder_batch_threshold = lc.s_q;
  bc.chunked_prefill_enabled = false;
  const MlaMetadataBuilder builder(bc);

  auto make_layer = [&] {
    MlaAttentionConfig c;
    c.dims = d;
    c.dtype = DType::bf16;
    c.kv_cache_dtype = lc.cache_dtype;
    c.device = dev;
    c.block_size = kBlock;
    c.max_query_tokens_per_request = lc.s_q;
    auto layer = std::make_unique<MlaAttention>(c);
    layer->process_weights_after_loading(w);
    return layer;
  };
  const KvCacheSpec spec{L, R, lc.cache_dtype, kBlock, lc.cache_dtype == DType::fp8_e4m3 ? 0.05f : 1.f};
  // One rank's cache (DcpConfig{} = the single-rank run) and the step's requests over it.
  auto make_rank = [&](const DcpConfig& dcp, uint64_t rseed, std::vector<RequestSpec>& specs) {
    test::RankCache rc = test::make_rank_cache(dcp, rank_reqs, spec, dev, rseed);
    for (int i = 0; i < reqs; ++i) {
      specs.push_back({.query_len = lc.s_q,
                       .num_computed_tokens = contexts[size_t(i)],
                       .block_table = std::move(rc.tables[size_t(i)])});
    }
    return std::move(rc.cache);
  };

  std::vector<OwnedTensor> results(size_t(1 + lc.world));
  {
    std::vector<RequestSpec> specs;
    auto cache = make_rank(DcpConfig{}, seed + 1, specs);
    MlaMetadata md = builder.build(specs);
    if (dev.is_cuda()) md.to_device(dev);
    auto layer = make_layer();
    OwnedTensor out = OwnedTensor::empty({tokens, int64_t(N) * V}, DType::bf16, dev);
    test::poison(out);
    layer->forward(q, kv_c, k_pe, *cache, md, out);
    results[0] = test::to_host(out);
  }
  const auto comms = test::make_group(lc.world, dev, lc.nccl);
  test::on_every_rank(lc.world, [&](int r) {
    auto layer = make_layer();
    layer->set_dcp(comms[size_t(r)].get(), lc.interleave, lc.method);
    const DcpConfig dcp = layer->dcp_config();
    std::vector<RequestSpec> specs;
    auto cache = make_rank(dcp, seed + 100 + uint64_t(r), specs);
    const DcpDecodePlan plan = build_dcp_decode_metadata(builder, specs, dcp, dev);
    OwnedTensor out = OwnedTensor::empty({tokens, int64_t(N) * V}, DType::bf16, dev);
    test::poison(out);
    // Twice: the second step reuses the layer's scratch (the cache write is idempotent).
    for (int i = 0; i < 2; ++i) layer->forward(q, kv_c, k_pe, *cache, plan, out);
    results[size_t(1 + r)] = test::to_host(out);
  });
  return results;
}

void expect_layer_matches_one_rank(const LayerCase& lc, const std::vector<int>& contexts, uint64_t seed) {
  const auto results = run_layer_step(lc, contexts, seed);
  test::expect_ranks_match_one_rank(results, lc.world);
  if (lc.world == 1 && lc.s_q == 1) {
    EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].tensor().nbytes()), 0)
        << "world size 1 differs from the single-rank bits";
  }
}

TEST(DcpLayer, WorldSizes1To4MatchOneRank) {
  for (int world = 1; world <= 4; ++world) {
    for (int interleave : {1, 3}) {
      SCOPED_TRACE("world " + std::to_string(world) + " interleave " + std::to_string(interleave));
      expect_layer_matches_one_rank({.world = world, .interleave = interleave}, kContexts, 10 + uint64_t(world));
    }
  }
}

TEST(DcpLayer, AllToAllOddHeadsSeveralQueryTokensFp8) {
  expect_layer_matches_one_rank({.world = 4, .method = DcpCombineMethod::all_to_all}, kContexts, 21);
  // 5 heads over 2 and 3 ranks: the whole-partial gather.
  expect_layer_matches_one_rank({.world = 2, .dims = {5, 32, 16, 8, 24}}, kContexts, 22);
  expect_layer_matches_one_rank({.world = 3, .dims = {5, 32, 16, 8, 24}}, kContexts, 23);
  for (int world : {1, 2, 3}) {
    SCOPED_TRACE("s_q 3 world " + std::to_string(world));
    expect_layer_matches_one_rank({.world = world, .interleave = 2, .s_q = 3}, kContexts, 30 + uint64_t(world));
  }
  expect_layer_matches_one_rank({.world = 3, .cache_dtype = DType::fp8_e4m3}, kContexts, 41);
}

TEST(DcpLayer, RefusesMixedUse) {
  MlaAttentionConfig c;
  c.dims = {4, 32, 16, 8, 24};
  c.dtype = DType::bf16;
  MlaAttention layer(c);
  DcpDecodePlan plan;
  OwnedTensor q = OwnedTensor::empty({1, 4, 24}, DType::bf16), kv = OwnedTensor::empty({1, 32}, DType::bf16),
              pe = OwnedTensor::empty({1, 8}, DType::bf16);
  OwnedLatentCache cache(2, 4, c.dims, DType::bf16);
  try {
    layer.forward(q, kv, pe, cache, plan);
    FAIL() << "a DCP plan without set_dcp was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("set_dcp"), std::string::npos) << e.what();
  }
  auto comms = make_in_process_group(2);
  EXPECT_THROW(layer.set_dcp(comms[0].get(), 0), ValueError);
  layer.set_dcp(comms[0].get(), 2);
  EXPECT_EQ(layer.dcp_config().world_size, 2);
  EXPECT_EQ(layer.dcp_config().interleave, 2);
  // The plain forward would attend over the shard alone.
  MetadataBuilderConfig bc;
  bc.block_size = 4;
  bc.chunked_prefill_enabled = false;
  const std::vector<RequestSpec> one{{.query_len = 1, .num_computed_tokens = 0, .block_table = {0}}};
  const MlaMetadata md = MlaMetadataBuilder(bc).build(one);
  try {
    layer.forward(q, kv, pe, cache, md);
    FAIL() << "a plain forward of a DCP layer was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("DcpDecodePlan"), std::string::npos) << e.what();
  }
  layer.set_dcp(nullptr);
  EXPECT_EQ(layer.dcp_config().world_size, 1);
  if (!query_cuda_devices().devices.empty()) {
    auto gpu_comms = make_in_process_group(1, Device::cuda(0));
    EXPECT_THROW(layer.set_dcp(gpu_comms[0].get()), ValueError);  // a CPU layer, a GPU communicator
  }
}

TEST(DcpLayerGpu, InProcessDeviceGroupAndNcclWorldOne) {
  LATTN_REQUIRE_GPU();
  const Device dev = Device::cuda(0);
  for (int world = 1; world <= 4; ++world) {
    SCOPED_TRACE("gpu world " + std::to_string(world));
    expect_layer_matches_one_rank({.world = world, .interleave = 2, .device = dev}, kContexts, 50 + uint64_t(world));
  }
  expect_layer_matches_one_rank(
      {.world = 2, .s_q = 2, .dims = {16, 512, 128, 64, 128}, .method = DcpCombineMethod::all_to_all, .device = dev},
      kContexts, 60);
  expect_layer_matches_one_rank({.world = 3, .cache_dtype = DType::fp8_e4m3, .device = dev}, kContexts, 61);
  if (nccl_available()) {
    expect_layer_matches_one_rank({.world = 1, .device = dev, .nccl = true}, kContexts, 62);
  } else {
    std::printf("NCCL not available: the NCCL world-1 layer step did not run\n");
  }
}

}  // namespace
}  // namespace lattn
