// MlaAttention with the reference backends: weight processing (TV-WEIGHTS),
// the seed's error texts (TV-FORWARD-ERR), V padding (TV-PADV), the
// equivalence of both paths with naive MHA (TV-MATH-1), chunked context at
// every workspace size, hostile data, fp8 caches, refused input (cache
// unchanged), preallocated and internal outputs, workspace reuse.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/backends/builtin_backends.h"
#include "lattn/attention.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "lattn/selector.h"
#include "support/backend_driver.h"

namespace lattn {
namespace {

using test::BackendCase;
using test::CaseRequest;
using test::PreparedStep;

const MlaDims kTiny{3, 32, 16, 8, 24};

BackendCase tiny_case(std::string name, std::vector<CaseRequest> decodes, std::vector<CaseRequest> prefills,
                      uint64_t seed) {
  BackendCase c;
  c.name = std::move(name);
  c.dims = kTiny;
  c.decodes = std::move(decodes);
  c.prefills = std::move(prefills);
  c.seed = seed;
  return c;
}

BackendCase mixed_case() { return tiny_case("mixed", {{37, 1}, {0, 1}, {16, 3}}, {{0, 9}, {21, 6}, {40, 13}}, 5); }

// ---------------------------------------------------------------------------
// Test-only prefill backends wrapping the reference: one pads V (a kernel
// that needs Dv == Dqk, seed's _pad_v), one cannot quantize its output.

std::shared_ptr<const PrefillBackendClass> reference_prefill_class() {
  for (const auto& cls : detail::builtin_prefill_classes())
    if (cls->name() == "reference") return cls;
  throw std::runtime_error("reference prefill backend not registered");
}

struct PaddingObservations {
  int new_token_calls = 0, chunk_calls = 0;
  bool v_padded_with_zeros = true, outputs_padded = true;
};
PaddingObservations g_padding;

class WrappedReference final : public PrefillBackend {
 public:
  WrappedReference(const PrefillBackendParams& p, bool pad_v)
      : PrefillBackend(p), inner_(reference_prefill_class()->create(p)), pad_v_(pad_v) {}
  std::string name() const override { return pad_v_ ? "test_padded_v" : "test_no_quant"; }
  bool pads_v() const override { return pad_v_; }
  void prepare_metadata(const PrefillMetadata& md) override {
    PrefillBackend::prepare_metadata(md);
    inner_->prepare_metadata(md);
  }
  void run_prefill_new_tokens(const Tensor& q, const Tensor& k, const Tensor& v, bool lse_wanted, const Tensor& out,
                              const Tensor& lse, const Tensor& output_scale) override {
    observe(v, out);
    ++g_padding.new_token_calls;
    inner_->run_prefill_new_tokens(q, k, v, lse_wanted, out, lse, output_scale);
  }
  void run_prefill_context_chunk(int i, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse) override {
    observe(v, out);
    ++g_padding.chunk_calls;
    inner_->run_prefill_context_chunk(i, q, k, v, out, lse);
  }

 private:
  void observe(const Tensor& v, const Tensor& out) const {
    if (!pad_v_) return;
    const int64_t qk = params_.qk_nope_head_dim + params_.qk_rope_head_dim, V = params_.v_head_dim;
    g_padding.outputs_padded &= v.size(2) == qk && out.size(2) == qk;
    for (int64_t t = 0; t < v.size(0); ++t)
      for (int64_t n = 0; n < v.size(1); ++n)
        for (int64_t d = V; d < v.size(2); ++d)
          g_padding.v_padded_with_zeros &=
              load_as_f32(v.data(), v.dtype(), t * v.stride(0) + n * v.stride(1) + d) == 0.f;
  }
  std::unique_ptr<PrefillBackend> inner_;
  bool pad_v_;
};

class WrappedReferenceClass final : public PrefillBackendClass {
 public:
  explicit WrappedReferenceClass(bool pad_v) : pad_v_(pad_v) {}
  std::string name() const override { return pad_v_ ? "test_padded_v" : "test_no_quant"; }
  std::vector<DType> supported_dtypes() const override { return {DType::f32, DType::f16, DType::bf16}; }
  bool supports_quant_output(QuantKey) const override { return pad_v_; }
  std::unique_ptr<PrefillBackend> create(const PrefillBackendParams& p) const override {
    return std::make_unique<WrappedReference>(p, pad_v_);
  }

 private:
  bool pad_v_;
};

const RegisterPrefillBackend kRegisterPadded{std::make_shared<WrappedReferenceClass>(true)};
const RegisterPrefillBackend kRegisterNoQuant{std::make_shared<WrappedReferenceClass>(false)};

// ---------------------------------------------------------------------------

TEST(TV_WEIGHTS, SplitsKvBProjPerHead) {
  MlaAttentionConfig config;
  config.dims = {2, 2, 1, 1, 1};  // N=2, L=2, P=1, R=1, V=1
  config.dtype = DType::f32;
  MlaAttention attention(config);
  // (out, in) = [N*(P+V), L]; rows: head0-nope, head0-v, head1-nope, head1-v.
  std::vector<float> w{1, 2, 3, 4, 5, 6, 7, 8};
  attention.process_weights_after_loading(Tensor(w.data(), DType::f32, {4, 2}));
  const Tensor& uk_t = attention.W_UK_T();
  const Tensor& uv = attention.W_UV();
  ASSERT_EQ(uk_t.shape_str(), "[2, 1, 2]");  // [N, P, L]
  ASSERT_EQ(uv.shape_str(), "[2, 2, 1]");    // [N, L, V]
  EXPECT_TRUE(uk_t.is_contiguous() && uv.is_contiguous());
  const float* k = uk_t.data_as<float>();
  const float* v = uv.data_as<float>();
  EXPECT_EQ(std::vector<float>(k, k + 4), (std::vector<float>{1, 2, 5, 6}));
  EXPECT_EQ(std::vector<float>(v, v + 4), (std::vector<float>{3, 4, 7, 8}));

  // Any floating dtype and strides: the same weight stored transposed ([L, N*(P+V)]) and in bf16.
  std::vector<uint16_t> wt(8);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 2; ++c) wt[size_t(c * 4 + r)] = f32_to_bf16(w[size_t(r * 2 + c)]);
  attention.process_weights_after_loading(Tensor(wt.data(), DType::bf16, {2, 4}).transpose(0, 1));
  EXPECT_EQ(std::vector<float>(attention.W_UK_T().data_as<float>(), attention.W_UK_T().data_as<float>() + 4),
            (std::vector<float>{1, 2, 5, 6}));
}

TEST(TV_WEIGHTS, WrongShapeRaisesTheSeedAssertion) {
  MlaAttentionConfig config;
  config.dims = {3, 2, 1, 1, 1};  // N=3 needs 6 rows; the weight has 4
  config.dtype = DType::f32;
  MlaAttention attention(config);
  std::vector<float> w{1, 2, 3, 4, 5, 6, 7, 8};
  try {
    attention.process_weights_after_loading(Tensor(w.data(), DType::f32, {4, 2}));
    FAIL() << "no AssertionError";
  } catch (const AssertionError& e) {
    EXPECT_STREQ(e.what(),
                 "kv_b_proj_weight.shape=torch.Size([2, 4]), self.kv_lora_rank=2, self.num_heads=3, "
                 "self.qk_nope_head_dim=1, self.v_head_dim=1");
  }
  EXPECT_THROW(attention.W_UK_T(), ValueError);  // nothing was loaded
}

TEST(TV_FORWARD_ERR, KvSharingIsRefusedAtConstruction) {
  MlaAttentionConfig config;
  config.dims = kTiny;
  config.kv_sharing_target_layer_name = "x";
  try {
    MlaAttention attention(config);
    FAIL() << "no NotImplementedError";
  } catch (const NotImplementedError& e) {
    EXPECT_STREQ(e.what(), "KV sharing not supported in V0.");
  }
}

TEST(TV_FORWARD_ERR, OutputScaleWithoutQuantizingBackendsRaisesTheSeedText) {
  BackendCase c = mixed_case();
  c.output_scale = 0.05f;
  PreparedStep step(c, "test_no_quant", "reference");
  const uint64_t cache_before = test::hash_bytes(step.cache().data);
  try {
    step.forward();
    FAIL() << "no NotImplementedError";
  } catch (const NotImplementedError& e) {
    EXPECT_STREQ(e.what(), "fused output quantization is not yet supported for MLAImplBase");
  }
  EXPECT_EQ(test::hash_bytes(step.cache().data), cache_before);
}

// lattn supports a preallocated output (the seed's "output is not yet
// supported for MLAImplBase" is not raised, docs/mla.md): it is written in
// place and equals the internal-buffer result.
TEST(TV_FORWARD_ERR, PreallocatedOutputIsWrittenInPlace) {
  PreparedStep step(mixed_case(), "reference", "reference");
  const Tensor result = step.forward();
  EXPECT_EQ(result.data(), step.out().data());
  const test::BackendRun in_place = step.result();

  PreparedStep again(mixed_case(), "reference", "reference");
  auto& md = again.metadata();
  const Tensor internal = again.attention().forward(again.q(), again.kv_c(), again.k_pe(), again.cache(), md);
  EXPECT_NE(internal.data(), again.out().data());
  EXPECT_EQ(internal.shape_str(), step.out().shape_str());
  const test::ErrorReport r = test::compare(internal, in_place.out);
  EXPECT_EQ(r.max_abs, 0.0) << r.str();
  // The internal buffer is reused by the next forward (valid until then).
  const Tensor second = again.attention().forward(again.q(), again.kv_c(), again.k_pe(), again.cache(), md);
  EXPECT_EQ(second.data(), internal.data());
}

TEST(TV_PADV, SeedRule) {
  EXPECT_TRUE(mla_pad_v(std::nullopt, DeviceCapability{9, 0}));  // no FlashAttention
  EXPECT_TRUE(mla_pad_v(2, DeviceCapability{9, 0}));
  EXPECT_FALSE(mla_pad_v(3, DeviceCapability{9, 0}));  // FA3 on Hopper: native Dv
  EXPECT_TRUE(mla_pad_v(3, DeviceCapability{8, 0}));
  EXPECT_TRUE(mla_pad_v(3, DeviceCapability{10, 0}));
  EXPECT_TRUE(mla_pad_v(3, std::nullopt));
}

TEST(TV_PADV, PaddedVBackendSeesZeroPaddedVAndGivesTheUnpaddedResult) {
  // DeepSeek head dims: q is 192 wide, v 128, so V is padded by 64 zero columns.
  for (bool with_context : {false, true}) {
    BackendCase c;
    c.name = with_context ? "padv_context" : "padv_new_only";
    c.dims = MlaDims::deepseek_v3(2);
    c.dtype = DType::f32;
    c.decodes = {{20, 1}};
    c.prefills = with_context ? std::vector<CaseRequest>{{40, 5}, {0, 3}} : std::vector<CaseRequest>{{0, 5}, {0, 3}};
    c.workspace_rows = 16;
    g_padding = {};
    const test::BackendRun padded = test::run_forward(c, "test_padded_v", "reference");
    EXPECT_GT(g_padding.new_token_calls, 0);
    EXPECT_EQ(g_padding.chunk_calls > 0, with_context);
    EXPECT_TRUE(g_padding.outputs_padded) << "v and out must be [T, N, P+R]";
    EXPECT_TRUE(g_padding.v_padded_with_zeros);
    const test::BackendRun plain = test::run_forward(c, "reference", "reference");
    const test::ErrorReport r = test::compare(padded.out, plain.out);
    EXPECT_EQ(r.max_abs, 0.0) << c.name << ": " << r.str();
    EXPECT_EQ(r.nan_mismatches, 0);
  }
}

// ---------------------------------------------------------------------------
// Both paths compute the MHA of docs/mla.md ("The two paths")

TEST(TV_MATH_1, AbsorbedDecodeEqualsNaiveMhaOverTheUpProjectedContext) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int s_q : {1, 2, 4}) {
      BackendCase c = tiny_case("decode", {{0, s_q}, {33, s_q}, {70, s_q}, {5, 1}}, {}, 40 + uint64_t(s_q));
      c.dtype = dtype;
      c.kv_cache_dtype = DType::f16;
      EXPECT_TRUE(test::check(test::run_reference_vs_naive(c))) << "s_q " << s_q;
    }
  }
  // DeepSeek dims, 16 heads, f32 activations: tolerance 1e-5 relative.
  BackendCase c;
  c.name = "decode_deepseek";
  c.dims = MlaDims::deepseek_v3(16);
  c.dtype = DType::f32;
  c.decodes = {{50, 1}, {17, 2}};
  EXPECT_TRUE(test::check(test::run_reference_vs_naive(c)));
}

// Chunked context == unchunked causal attention over [context | new] for
// every workspace size from one page up to the whole context.
void sweep_workspace(BackendCase c, int64_t smallest, int64_t largest) {
  c.dtype = DType::f32;  // tight bound: 1e-5 relative
  const OwnedTensor naive = test::naive_forward(c);
  c.workspace_rows = largest;
  const test::BackendRun one_chunk = test::run_forward(c, "reference", "reference");
  std::set<int> chunk_counts;
  for (int64_t ws = smallest; ws <= largest; ++ws) {
    c.workspace_rows = ws;
    PreparedStep step(c, "reference", "reference");
    chunk_counts.insert(step.metadata().prefill->chunks.num_chunks);
    step.forward();
    const test::BackendRun run = step.result();
    const test::ErrorReport vs_naive = test::compare(run.out, naive);
    EXPECT_LE(vs_naive.rel_l2, test::rel_tolerance(DType::f32)) << "workspace " << ws << ": " << vs_naive.str();
    const test::ErrorReport vs_one = test::compare(run.out, one_chunk.out);
    EXPECT_LE(vs_one.rel_l2, test::rel_tolerance(DType::f32)) << "workspace " << ws << ": " << vs_one.str();
  }
  EXPECT_GT(chunk_counts.size(), 3u) << "the sweep must exercise several chunk counts";
}

TEST(TV_MATH_1, ChunkedContextEqualsUnchunkedForEveryWorkspaceSize) {
  // One prefill with context 100 (block 16): pages 16..112.
  sweep_workspace(tiny_case("one_context", {{3, 1}}, {{100, 7}}, 50), 16, 112);
}

TEST(TV_MATH_1, ChunkedContextWithSeveralPrefillsAndBlockSize1) {
  BackendCase c = tiny_case("block_1", {{30, 1}}, {{13, 4}, {0, 2}, {9, 3}}, 51);
  c.block_size = 1;
  // Two prefills with context: the smallest workspace gives each one token per chunk.
  // The decode's longer context adds all-empty trailing chunks (docs/metadata.md).
  sweep_workspace(c, 2, 26);
}

// ---------------------------------------------------------------------------
// Hostile data.

TEST(HostileData, PoisonNeverReachesOutputsAndOnlyNewSlotsAreWritten) {
  for (const BackendCase& c : test::small_forward_cases()) {
    if (!c.hostile || !c.plants.empty()) continue;  // planted NaN/inf reach the rows that see them
    PreparedStep step(c, "reference", "reference");
    const std::vector<uint8_t> before = step.cache_bytes();
    step.forward();
    const test::BackendRun run = step.result();
    int64_t non_finite = 0;
    for (int64_t i = 0; i < run.out.tensor().numel(); ++i) non_finite += !std::isfinite(run.out.data_as<float>()[i]);
    EXPECT_EQ(non_finite, 0) << c.str();
    // Entries written = exactly the real tokens' slots.
    const auto& md = step.metadata();
    const int64_t entry_bytes = step.cache().entry_dim() * step.cache().data.element_size();
    std::set<int64_t> written;
    for (int64_t t = 0; t < md.num_actual_tokens; ++t) written.insert(md.slot_mapping_cpu.data_as<int64_t>()[t]);
    int64_t wrong = 0;
    for (int64_t slot = 0; slot * entry_bytes < int64_t(before.size()); ++slot) {
      const bool changed = std::memcmp(&before[size_t(slot * entry_bytes)],
                                       &run.cache_bytes[size_t(slot * entry_bytes)], size_t(entry_bytes)) != 0;
      const bool expected = written.count(slot) > 0;
      // A written slot may by chance hold the same bytes; an unwritten slot must never change.
      wrong += changed && !expected;
    }
    EXPECT_EQ(wrong, 0) << c.str();
    const int64_t pad_rows = c.pad_tokens;
    for (int64_t t = run.out.tensor().size(0) - pad_rows; t < run.out.tensor().size(0); ++t)
      for (int64_t e = 0; e < run.out.tensor().size(1); ++e)
        EXPECT_EQ(run.out.data_as<float>()[t * run.out.tensor().size(1) + e], 0.f) << "padded row " << t;
  }
}

TEST(HostileData, Fp8CacheStaysWithinItsErrorOfTheBf16Result) {
  for (BackendCase c : {mixed_case(), tiny_case("fp8_chunked", {{60, 2}}, {{45, 5}, {0, 3}}, 61)}) {
    c.workspace_rows = 32;
    const test::BackendRun bf16 = test::run_forward(c, "reference", "reference");
    c.kv_cache_dtype = DType::fp8_e4m3;
    c.cache_scale = 0.05f;
    const test::BackendRun fp8 = test::run_forward(c, "reference", "reference");
    const test::ErrorReport r = test::compare(fp8.out, bf16.out);
    EXPECT_LE(r.rel_l2, test::rel_tolerance(DType::fp8_e4m3)) << c.str() << ": " << r.str();
    EXPECT_GT(r.rel_l2, 1e-3) << "the fp8 cache must actually be read (its rounding shows)";
    EXPECT_EQ(r.nan_mismatches, 0);
  }
}

// ---------------------------------------------------------------------------
// Bad input: a clear error naming the argument, and the cache unchanged.

template <class Fn>
void expect_refused(PreparedStep& step, Fn fn, const std::string& needle) {
  const uint64_t before = test::hash_bytes(step.cache().data);
  try {
    fn();
    ADD_FAILURE() << "no ValueError (expected one mentioning '" << needle << "')";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(test::hash_bytes(step.cache().data), before) << "refused forward changed the cache (" << needle << ")";
}

TEST(BadInput, MismatchedShapesAndDtypes) {
  PreparedStep step(mixed_case(), "reference", "reference");
  MlaAttention& a = step.attention();
  const auto& md = step.metadata();
  const int64_t T = step.q().size(0);
  const MlaDims& d = kTiny;
  const OwnedTensor q_heads = OwnedTensor::zeros({T, d.num_heads - 1, d.qk_head_dim()}, DType::bf16);
  expect_refused(
      step, [&] { a.forward(q_heads, step.kv_c(), step.k_pe(), step.cache(), md); }, "'q'");
  const OwnedTensor q_f16 = OwnedTensor::zeros({T, d.num_heads, d.qk_head_dim()}, DType::f16);
  expect_refused(
      step, [&] { a.forward(q_f16, step.kv_c(), step.k_pe(), step.cache(), md); }, "'q'");
  expect_refused(
      step, [&] { a.forward(step.q(), step.kv_c().narrow(0, 0, T - 1), step.k_pe(), step.cache(), md); },
      "'kv_c_normed'");
  const OwnedTensor k_pe_wide = OwnedTensor::zeros({T, d.qk_rope_head_dim + 1}, DType::bf16);
  expect_refused(
      step, [&] { a.forward(step.q(), step.kv_c(), k_pe_wide, step.cache(), md); }, "'k_pe'");
  const OwnedTensor out_short = OwnedTensor::zeros({T, d.num_heads * d.v_head_dim - 1}, DType::bf16);
  expect_refused(
      step, [&] { a.forward(step.q(), step.kv_c(), step.k_pe(), step.cache(), md, out_short); }, "'out'");
  const OwnedTensor scale = OwnedTensor::zeros({1}, DType::f32);
  expect_refused(
      step, [&] { a.forward(step.q(), step.kv_c(), step.k_pe(), step.cache(), md, step.out(), scale); },
      "'out'");  // with output_scale the output must be fp8_e4m3
  OwnedLatentCache f16_cache(step.cache().num_blocks(), step.cache().block_size(), d, DType::f16);
  expect_refused(
      step, [&] { a.forward(step.q(), step.kv_c(), step.k_pe(), f16_cache, md); }, "'cache'");
}

TEST(BadInput, SlotBeyondTheCache) {
  PreparedStep step(mixed_case(), "reference", "reference");
  auto& md = step.metadata();
  const int64_t capacity = step.cache().num_blocks() * step.cache().block_size();
  md.slot_mapping_cpu.data_as<int64_t>()[4] = capacity;  // one past the last slot
  expect_refused(
      step, [&] { step.forward(); }, "slot_mapping");
}

TEST(BadInput, DecodeBlockTablePastTheCache) {
  PreparedStep step(mixed_case(), "reference", "reference");
  auto& md = step.metadata();
  md.decode->block_table_cpu.data_as<int32_t>()[0] = int32_t(step.cache().num_blocks());
  expect_refused(
      step, [&] { step.forward(); }, "block_table");
}

TEST(BadInput, PrefillContextBlockTablePastTheCache) {
  PreparedStep step(mixed_case(), "reference", "reference");
  auto& md = step.metadata();
  const Tensor& table = md.prefill->block_table_cpu;  // prefill 1 has context 21: columns 0 and 1
  table.data_as<int32_t>()[1 * table.stride(0) + 1] = -1;
  expect_refused(
      step, [&] { step.forward(); }, "block_table");
}

TEST(BadInput, ChunkPlanThatMissesContextOrIsUnaligned) {
  BackendCase c = mixed_case();
  c.workspace_rows = 32;
  {
    PreparedStep step(c, "reference", "reference");
    auto& chunks = step.metadata().prefill->chunks;
    ASSERT_GT(chunks.num_chunks, 1);
    chunks.starts_cpu.data_as<int32_t>()[1 * chunks.starts_cpu.stride(0) + 2] += 1;  // chunk 1 of prefill 2
    expect_refused(
        step, [&] { step.forward(); }, "chunks.starts");
  }
  {
    PreparedStep step(c, "reference", "reference");
    step.metadata().prefill->chunks.num_chunks = 0;  // context would be ignored
    step.metadata().prefill->chunks.seq_tot.clear();
    expect_refused(
        step, [&] { step.forward(); }, "chunks");
  }
}

TEST(BadInput, MetadataOnAnotherDeviceAndWeightsNotLoaded) {
  PreparedStep step(mixed_case(), "reference", "reference");
  step.metadata().device = Device::cuda(0);
  expect_refused(
      step, [&] { step.forward(); }, "metadata");
  step.metadata().device = Device::cpu();

  MlaAttentionConfig config;
  config.dims = kTiny;
  MlaAttention fresh(config);
  expect_refused(
      step, [&] { fresh.forward(step.q(), step.kv_c(), step.k_pe(), step.cache(), step.metadata()); },
      "process_weights_after_loading");
}

// ---------------------------------------------------------------------------
// Scratch memory: reused after warm-up; the context part does not grow with
// the context (only with the plan's workspace).

TEST(Workspace, ReusedAfterWarmUpAndBoundedByTheChunkWorkspace) {
  BackendCase big = tiny_case("long_context", {{10, 1}}, {{1000, 4}}, 70);
  big.workspace_rows = 64;
  BackendCase small = tiny_case("short_context", {{10, 1}}, {{100, 4}}, 70);
  small.workspace_rows = 64;
  PreparedStep long_step(big, "reference", "reference"), short_step(small, "reference", "reference");
  long_step.forward();
  short_step.forward();
  EXPECT_EQ(long_step.attention().workspace_bytes(), short_step.attention().workspace_bytes())
      << "10x the context must not need more scratch memory";
  const size_t warm = long_step.attention().workspace_bytes();
  long_step.forward();
  EXPECT_EQ(long_step.attention().workspace_bytes(), warm);
}

// ---------------------------------------------------------------------------
// Metadata the engine builds in special modes.

// A CUDA-graph build pads a decode batch with dummy decodes (seq_len 1, slot
// PAD_SLOT_ID): the forward computes them too, and the real rows are the
// ones a normal build gives.
TEST(GraphAndProfileMetadata, CudaGraphPaddedDecodeBatch) {
  BackendCase c = tiny_case("graph", {{37, 1}, {0, 1}, {16, 1}}, {}, 80);
  c.pad_tokens = 2;  // q has 5 rows: room for the padded batch of 4 and one more
  PreparedStep step(c, "reference", "reference");
  const MlaMetadata& normal = step.metadata();
  std::vector<lattn::RequestSpec> requests;
  for (int r = 0; r < normal.num_reqs; ++r) {
    const int32_t seq = normal.seq_lens_cpu.data_as<int32_t>()[r];
    const int32_t context = normal.context_lens_cpu.data_as<int32_t>()[r];
    const int32_t* row = normal.block_table_cpu.data_as<int32_t>() + r * normal.block_table_cpu.stride(0);
    requests.push_back(
        {seq - context, context, std::vector<int32_t>(row, row + (seq + c.block_size - 1) / c.block_size)});
  }
  MetadataBuilderConfig config;
  config.block_size = c.block_size;
  config.context_chunk_workspace_size = 64;
  config.cudagraph = CudaGraphConfig{8, 256, 0, {}};
  MlaMetadata graph = MlaMetadataBuilder(config).build_for_cudagraph(requests);
  graph.to_device(Device::cpu());
  ASSERT_EQ(graph.num_decode_tokens, 4);  // padded to the captured size 4
  ASSERT_EQ(graph.num_actual_tokens, 3);

  step.forward();
  const test::BackendRun reference = step.result();
  test::poison(step.out());
  step.attention().forward(step.q(), step.kv_c(), step.k_pe(), step.cache(), graph, step.out());
  const OwnedTensor got = test::to_host_f32(step.out());
  const int64_t width = got.tensor().size(1);
  const test::ErrorReport real_rows =
      test::compare(got.tensor().narrow(0, 0, 3), reference.out.tensor().narrow(0, 0, 3));
  EXPECT_EQ(real_rows.max_abs, 0.0) << real_rows.str();
  for (int64_t e = 0; e < width; ++e) EXPECT_EQ(got.data_as<float>()[4 * width + e], 0.f) << "row 4 is past the batch";
}

// A profile run reserves the whole context-chunk scratch (the seed's
// worst-case allocation), so memory profiling sees the peak.
TEST(GraphAndProfileMetadata, ProfileRunReservesTheContextWorkspace) {
  BackendCase c = tiny_case("profile", {}, {{0, 9}, {0, 5}}, 81);
  PreparedStep normal(c, "reference", "reference");
  normal.forward();
  PreparedStep profile(c, "reference", "reference");
  profile.metadata().is_profile_run = true;
  profile.metadata().context_chunk_workspace_size = 512;
  profile.forward();
  const MlaDims& d = c.dims;
  const size_t context_bytes = 512 * size_t(d.cache_entry_dim() + d.num_heads * (d.qk_head_dim() + d.v_head_dim)) * 2;
  EXPECT_GE(profile.attention().workspace_bytes(), normal.attention().workspace_bytes() + context_bytes);
}

TEST(TV_SHAPE, MetadataHeadDimMustBeASupportedHeadSize) {
  EXPECT_EQ(MlaCommonBackend::get_supported_head_sizes(), mla_supported_head_sizes());
  MetadataBuilderConfig config;
  config.context_chunk_workspace_size = 64;
  config.head_dim = 512;
  EXPECT_THROW(MlaMetadataBuilder{config}, ValueError);
  config.head_dim = 576;
  EXPECT_NO_THROW(MlaMetadataBuilder{config});
  config.head_dim.reset();
  EXPECT_NO_THROW(MlaMetadataBuilder{config});
}

TEST(Backends, ReferenceIsRegisteredAndChosenByName) {
  MlaAttentionConfig config;
  config.dims = kTiny;
  config.prefill_backend = "reference";
  config.decode_backend = "reference";
  MlaAttention attention(config);
  EXPECT_EQ(attention.prefill_backend().name(), "reference");
  EXPECT_EQ(attention.decode_backend().name(), "reference");
  config.prefill_backend = "no_such_backend";
  EXPECT_THROW(MlaAttention{config}, ValueError);
}

TEST(Backends, AutomaticChoiceIsTheSelectorsAndInvalidChoicesAreRefused) {
  MlaAttentionConfig config;
  config.dims = kTiny;
  MlaAttention automatic(config);
  SelectorConfig selector = SelectorConfig::for_dims(config.dims, config.dtype, config.kv_cache_dtype, config.device,
                                                     config.block_size, config.max_query_tokens_per_request);
  EXPECT_EQ(automatic.prefill_backend().name(), get_mla_prefill_backend(selector)->name());
  EXPECT_EQ(automatic.decode_backend().name(), get_mla_decode_backend(selector)->name());
  // A backend that exists but cannot serve the layer: the seed's refusal text.
  config.decode_backend = "hopper";
  try {
    MlaAttention refused(config);
    FAIL() << "no ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Selected MLA decode backend hopper is not valid for this configuration"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lattn
