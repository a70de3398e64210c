// The per-step cost of planning: MlaMetadataBuilder::build for a 1024-request
// mixed batch (decodes first, then prefills with and without context), from
// RequestSpec and from CommonAttentionMetadata, plus a decode-only CUDA-graph
// padded build. Host only: the numbers are what every step pays before any
// kernel runs. Target (issue 3): well under 1 ms per build on one core.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "lattn/metadata.h"

namespace {

using namespace lattn;

constexpr int kBlockSize = 16;

struct Batch {
  std::vector<RequestSpec> requests;
  // The runner-side arrays of the same batch (CommonAttentionMetadata).
  std::vector<int32_t> qsl, seq_lens, computed, block_table;
  std::vector<int64_t> slots;
  int64_t width = 0;
  int64_t num_tokens = 0;
  int max_query_len = 0;
};

// num_decodes decodes with contexts of 100..4000 tokens, then prefills of
// 16..512 new tokens, half of them with 0..2000 tokens of context.
Batch make_batch(int num_decodes, int num_prefills, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Batch b;
  int next_block = 0;
  auto add = [&](int query_len, int context_len) {
    const int blocks = (query_len + context_len + kBlockSize - 1) / kBlockSize;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int32_t& x : table) x = next_block++;
    b.requests.push_back({query_len, context_len, std::move(table)});
  };
  for (int i = 0; i < num_decodes; ++i) add(1, uniform(100, 4000));
  for (int i = 0; i < num_prefills; ++i) add(uniform(16, 512), uniform(0, 1) ? uniform(0, 2000) : 0);

  for (const RequestSpec& r : b.requests) b.width = std::max<int64_t>(b.width, int64_t(r.block_table.size()));
  b.qsl.push_back(0);
  for (const RequestSpec& r : b.requests) {
    b.qsl.push_back(b.qsl.back() + r.query_len);
    b.seq_lens.push_back(r.num_computed_tokens + r.query_len);
    b.computed.push_back(r.num_computed_tokens);
    b.max_query_len = std::max(b.max_query_len, r.query_len);
    std::vector<int32_t> row = r.block_table;
    row.resize(size_t(b.width), 0);
    b.block_table.insert(b.block_table.end(), row.begin(), row.end());
    for (int64_t t = r.num_computed_tokens; t < r.num_computed_tokens + r.query_len; ++t) {
      b.slots.push_back(int64_t(r.block_table[size_t(t / kBlockSize)]) * kBlockSize + t % kBlockSize);
    }
  }
  b.num_tokens = b.qsl.back();
  return b;
}

MetadataBuilderConfig config() {
  MetadataBuilderConfig c;
  c.block_size = kBlockSize;
  // DeepSeek-style sizing: max_model_len 163840, max_num_seqs 1024.
  c.context_chunk_workspace_size = mla_context_chunk_workspace_size(163840, 1024, kBlockSize);
  return c;
}

void set_counters(benchmark::State& state, const Batch& b) {
  state.counters["requests"] = double(b.requests.size());
  state.counters["tokens"] = double(b.num_tokens);
  state.counters["block_table_entries"] = double(b.requests.size()) * double(b.width);
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(b.requests.size()));
}

// 1024 requests: 960 decodes + 64 prefills.
void BM_BuildMixed1024(benchmark::State& state) {
  const Batch b = make_batch(960, 64, 1);
  const MlaMetadataBuilder builder(config());
  for (auto _ : state) {
    MlaMetadata m = builder.build(b.requests);
    benchmark::DoNotOptimize(m.storage.get());
  }
  set_counters(state, b);
}
BENCHMARK(BM_BuildMixed1024)->Unit(benchmark::kMicrosecond);

void BM_BuildMixed1024FromCommon(benchmark::State& state) {
  Batch b = make_batch(960, 64, 1);
  const int n = int(b.requests.size());
  const CommonAttentionMetadata common(
      Tensor(b.qsl.data(), DType::i32, {n + 1}), Tensor(b.qsl.data(), DType::i32, {n + 1}),
      Tensor(b.seq_lens.data(), DType::i32, {n}), Tensor(b.seq_lens.data(), DType::i32, {n}),
      Tensor(b.computed.data(), DType::i32, {n}), n, int(b.num_tokens), b.max_query_len,
      Tensor(b.block_table.data(), DType::i32, {n, b.width}), Tensor(b.slots.data(), DType::i64, {b.num_tokens}));
  const MlaMetadataBuilder builder(config());
  for (auto _ : state) {
    MlaMetadata m = builder.build(common);
    benchmark::DoNotOptimize(m.storage.get());
  }
  set_counters(state, b);
}
BENCHMARK(BM_BuildMixed1024FromCommon)->Unit(benchmark::kMicrosecond);

// Decode-only, 1000 requests padded to the captured size 1024 in the
// builder's persistent CUDA-graph buffers.
void BM_BuildDecodeGraphPadded1024(benchmark::State& state) {
  const Batch b = make_batch(1000, 0, 2);
  MetadataBuilderConfig c = config();
  c.cudagraph = CudaGraphConfig{1024, 8192, 0, {}};
  const MlaMetadataBuilder builder(c);
  for (auto _ : state) {
    MlaMetadata m = builder.build_for_cudagraph(b.requests);
    benchmark::DoNotOptimize(m.storage.get());
  }
  set_counters(state, b);
}
BENCHMARK(BM_BuildDecodeGraphPadded1024)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
