// MlaAttention under decode context parallelism (set_dcp + the DcpDecodePlan
// overload of forward, docs/dcp.md): whole layer decode steps on W ranks (one
// thread and one layer each, each rank with its own NaN-poisoned cache with
// permuted blocks holding only its shard) against the same step on one rank.
// On the CPU with the in-process communicator (CI), world sizes 1-4; on a GPU
// (when there is one) with the in-process group over device buffers and NCCL
// with world size 1. World size 1 with s_q = 1 gives the single-rank bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "lattn/attention.h"
#include "lattn/cache.h"
#include "lattn/communicator.h"
#include "lattn/dcp.h"
#include "lattn/errors.h"
#include "lattn/ops.h"
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

OwnedTensor on(const Tensor& host, Device dev) {
  if (dev.is_cpu()) {
    OwnedTensor t = OwnedTensor::empty(host.shape(), host.dtype());
    copy_tensor(host, t);
    return t;
  }
  return test::to_device(host, dev);
}

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
  const OwnedTensor q = on(host_rand({tokens, N, P + R}), dev), kv_c = on(host_rand({tokens, L}), dev),
                    k_pe = on(host_rand({tokens, R}), dev);
  const OwnedTensor w = host_rand({int64_t(N) * (P + V), L}, 0.2f);
  std::vector<OwnedTensor> ctx_kv_dev, ctx_pe_dev;
  for (int i = 0; i < reqs; ++i) {
    ctx_kv_dev.push_back(on(ctx_kv[size_t(i)], dev));
    ctx_pe_dev.push_back(on(ctx_pe[size_t(i)], dev));
  }

  MetadataBuilderConfig bc;
  bc.block_size = kBlock;
  bc.reorder_batch_threshold = lc.s_q;
  bc.chunked_prefill_enabled = false;
  const MlaMetadataBuilder builder(bc);
  const float cache_scale = lc.cache_dtype == DType::fp8_e4m3 ? 0.05f : 1.f;

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
  // One rank's cache (world 1 = the single-rank run): poisoned, permuted blocks,
  // the context tokens this rank owns written at their local slots.
  auto make_rank = [&](const DcpConfig& dcp, uint64_t rseed, std::vector<RequestSpec>& specs) {
    std::mt19937_64 prng(rseed);
    std::vector<int64_t> local_lens;
    int64_t blocks = 1;
    for (int i = 0; i < reqs; ++i) {
      local_lens.push_back(dcp_local_count(dcp, contexts[size_t(i)] + lc.s_q));
      blocks += (local_lens.back() + kBlock - 1) / kBlock + 1;
    }
    auto cache = std::make_unique<OwnedLatentCache>(blocks, kBlock, d, lc.cache_dtype, dev, cache_scale);
    test::poison(cache->cache().data);
    std::vector<int32_t> ids(static_cast<size_t>(blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), prng);
    size_t next = 0;
    for (int i = 0; i < reqs; ++i) {
      RequestSpec spec{.query_len = lc.s_q, .num_computed_tokens = contexts[size_t(i)], .block_table = {}};
      for (int64_t b = 0; b < (local_lens[size_t(i)] + kBlock - 1) / kBlock + 1; ++b)
        spec.block_table.push_back(ids[next++]);
      OwnedTensor slots = OwnedTensor::empty({std::max(contexts[size_t(i)], 1)}, DType::i64);
      auto* s = slots.data_as<int64_t>();
      for (int64_t p = 0; p < slots.tensor().numel(); ++p) {
        s[p] = PAD_SLOT_ID;
        if (p >= contexts[size_t(i)] || dcp_owner(dcp, p) != dcp.rank) continue;
        const int64_t lp = dcp_local_position(dcp, p);
        s[p] = int64_t(spec.block_table[size_t(lp / kBlock)]) * kBlock + lp % kBlock;
      }
      concat_and_cache_mla(ctx_kv_dev[size_t(i)], ctx_pe_dev[size_t(i)], *cache, on(slots, dev));
      specs.push_back(std::move(spec));
    }
    return cache;
  };
  auto to_host = [&](const Tensor& t) {
    OwnedTensor h = OwnedTensor::empty(t.shape(), t.dtype());
    copy_tensor(t, h);
    return h;
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
    results[0] = to_host(out);
  }
  std::vector<std::unique_ptr<Communicator>> comms;
  if (lc.nccl) {
    comms.push_back(make_nccl_communicator(nccl_unique_id(), 1, 0, dev));
  } else {
    comms = make_in_process_group(lc.world, dev);
  }
  std::vector<std::exception_ptr> errors(size_t(lc.world));
  std::vector<std::thread> threads;
  for (int r = 0; r < lc.world; ++r) {
    threads.emplace_back([&, r] {
      try {
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
        results[size_t(1 + r)] = to_host(out);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

void expect_layer_matches_one_rank(const LayerCase& lc, const std::vector<int>& contexts, uint64_t seed) {
  const auto results = run_layer_step(lc, contexts, seed);
  // The single-rank output is a real result (finite, not all zero), so a
  // match below means something.
  const OwnedTensor single = test::to_host_f32(results[0]);
  double norm = 0;
  for (int64_t i = 0; i < single.tensor().numel(); ++i) {
    const double v = single.data_as<float>()[i];
    ASSERT_TRUE(std::isfinite(v)) << "single-rank output element " << i;
    norm += v * v;
  }
  ASSERT_GT(norm, 0.0);
  for (int r = 0; r < lc.world; ++r) {
    const test::ErrorReport e = test::compare(results[size_t(1 + r)], results[0]);
    EXPECT_EQ(e.nan_mismatches, 0) << "rank " << r << ": " << e.str();
    EXPECT_LE(e.rel_l2, test::rel_tolerance(DType::bf16)) << "rank " << r << ": " << e.str();
  }
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
