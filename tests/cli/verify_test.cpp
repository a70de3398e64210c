// --verify's recorder and reference replay: outputs computed the way the
// engine computes them pass; a wrong value, a NaN, or a step the run never
// produced fails.
#include "serving/verify.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "lattn/attention.h"
#include "lattn/cache.h"
#include "lattn/metadata.h"
#include "serving/activations.h"

namespace lattn::serving {
namespace {

enum class Fault { none, wrong_values, nan, missing_step };

struct StepPlan {
  int32_t query_len, num_computed_tokens;
};

// One request of prompt 40 and output 4, served as a chunked prefill (24 +
// 16 with context) and three decodes, on the selected backends with a scattered
// block table, every output recorded (except where `fault` says otherwise).
VerifyReport serve_and_verify(Fault fault, DType kv_cache_dtype = DType::bf16) {
  VerifyConfig config;
  config.dims = MlaDims::deepseek_v3(4);
  config.num_layers = 1;
  config.dtype = DType::bf16;
  config.kv_cache_dtype = kv_cache_dtype;
  config.block_size = 16;
  config.context_chunk_workspace_size = mla_context_chunk_workspace_size(44, 1, 16);
  config.seed = 3;
  Request request;
  request.id = 7;
  request.prompt_len = 40;
  request.output_len = 4;
  OutputRecorder recorder(config, {request});

  const MlaDims& d = config.dims;
  MlaAttentionConfig ac;
  ac.dims = d;
  ac.dtype = config.dtype;
  ac.kv_cache_dtype = kv_cache_dtype;
  // The selector's choice: the backends a plain `lattn run` serves with.
  ac.block_size = config.block_size;
  MlaAttention attention(ac);
  const ActivationSource source(config.seed, d);
  OwnedTensor weight =
      OwnedTensor::empty({int64_t(d.num_heads) * (d.qk_nope_head_dim + d.v_head_dim), d.kv_lora_rank}, DType::f32);
  source.fill_kv_b_proj(0, weight);
  attention.process_weights_after_loading(weight);
  OwnedLatentCache cache(8, config.block_size, d, kv_cache_dtype);
  fill_bytes(cache.cache().data, 0xff);

  MetadataBuilderConfig bc;
  bc.block_size = config.block_size;
  bc.context_chunk_workspace_size = config.context_chunk_workspace_size;
  const MlaMetadataBuilder builder(bc);
  const std::vector<int32_t> block_table = {5, 2, 7};  // 3 blocks cover the 43 positions
  const std::vector<StepPlan> steps = {{24, 0}, {16, 24}, {1, 40}, {1, 41}, {1, 42}};
  for (size_t s = 0; s < steps.size(); ++s) {
    const StepPlan& plan = steps[s];
    RequestSpec spec{plan.query_len, plan.num_computed_tokens, block_table};
    const MlaMetadata metadata = builder.build(std::span<const RequestSpec>(&spec, 1));
    std::vector<TokenRef> tokens;
    for (int32_t i = 0; i < plan.query_len; ++i) tokens.push_back({request.id, plan.num_computed_tokens + i});
    OwnedTensor q = OwnedTensor::empty({plan.query_len, d.num_heads, d.qk_head_dim()}, config.dtype);
    OwnedTensor kv_c = OwnedTensor::empty({plan.query_len, d.kv_lora_rank}, config.dtype);
    OwnedTensor k_pe = OwnedTensor::empty({plan.query_len, d.qk_rope_head_dim}, config.dtype);
    source.fill_inputs(0, tokens, q, kv_c, k_pe);
    const Tensor out = attention.forward(q, kv_c, k_pe, cache, metadata);

    const bool last = s + 1 == steps.size();
    if (last && fault == Fault::missing_step) continue;
    OwnedTensor recorded = OwnedTensor::empty({out.size(0), out.size(1)}, out.dtype());
    copy_host(out, recorded);
    if (last && fault == Fault::wrong_values) {
      for (int64_t i = 0; i < recorded.tensor().numel(); ++i) {
        store_from_f32(recorded.data(), recorded.tensor().dtype(), i,
                       load_as_f32(recorded.data(), recorded.tensor().dtype(), i) + 1.0f);
      }
    }
    if (last && fault == Fault::nan) store_from_f32(recorded.data(), recorded.tensor().dtype(), 5, NAN);
    ScheduledRow row;
    row.request_id = request.id;
    row.query_len = plan.query_len;
    row.num_computed_tokens = plan.num_computed_tokens;
    row.block_table = block_table;
    recorder.record(0, row, recorded);
  }
  return recorder.verify();
}

TEST(Verify, OutputsOfTheSelectedBackendsMatchTheReference) {
  for (const DType cache_dtype : {DType::bf16, DType::fp8_e4m3}) {
    const VerifyReport report = serve_and_verify(Fault::none, cache_dtype);
    ASSERT_EQ(report.requests.size(), 1u);
    const VerifiedRequest& r = report.requests[0];
    EXPECT_TRUE(report.passed) << "worst " << report.worst_rel_l2;
    EXPECT_LT(report.worst_rel_l2, verify_bound(DType::bf16));
    EXPECT_EQ(report.worst_request, 7);
    EXPECT_EQ(r.positions, 43);
    EXPECT_EQ(r.prefill_chunks, 2);
    EXPECT_EQ(r.chunks_with_context, 1);
    EXPECT_EQ(r.decode_steps, 3);
    EXPECT_TRUE(r.finite && r.complete);
  }
}

TEST(Verify, AWrongOutputFails) {
  const VerifyReport report = serve_and_verify(Fault::wrong_values);
  EXPECT_FALSE(report.passed);
  EXPECT_GT(report.worst_rel_l2, report.bound);
}

TEST(Verify, ANanOutputFails) {
  const VerifyReport report = serve_and_verify(Fault::nan);
  EXPECT_FALSE(report.passed);
  EXPECT_FALSE(report.requests.at(0).finite);
}

TEST(Verify, AMissingStepFails) {
  const VerifyReport report = serve_and_verify(Fault::missing_step);
  EXPECT_FALSE(report.passed);
  EXPECT_FALSE(report.requests.at(0).complete);
  EXPECT_EQ(report.requests.at(0).positions, 42);
}

TEST(Verify, BoundsFollowTheActivationDtype) {
  EXPECT_EQ(verify_bound(DType::bf16), 1e-2);
  EXPECT_EQ(verify_bound(DType::f16), 2e-3);
  EXPECT_EQ(verify_bound(DType::f32), 1e-5);
}

TEST(Verify, PicksAChunkedPrefillAndADecodeFirst) {
  std::vector<Request> trace;
  for (int i = 0; i < 10; ++i) trace.push_back({i, 0.0, 10 + 50 * i, 1});
  trace[6].output_len = 5;  // the only request that decodes
  const auto picked = pick_verify_requests(trace, 3, /*max_num_batched_tokens=*/200);
  ASSERT_EQ(picked.size(), 3u);
  std::vector<int64_t> ids;
  for (const Request& r : picked) ids.push_back(r.id);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 4), ids.end());   // shortest prompt > 200 (210)
  EXPECT_NE(std::find(ids.begin(), ids.end(), 6), ids.end());   // the only one with output >= 2
  EXPECT_EQ(pick_verify_requests(trace, 20, 200).size(), 10u);  // never more than the trace
}

}  // namespace
}  // namespace lattn::serving
