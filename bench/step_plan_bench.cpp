// The decode planning one step pays across a model's layers: 61 layers
// (DeepSeek-V3), each with its own `cpu` decode backend instance, prepare the
// same step's decode metadata, as MlaAttention::forward does once per layer.
// Since a step's plan is shared by all layers (lattn/step_plans.h), the first
// layer plans and the other 60 reuse its plan. Public API only, so the same
// file measures an older library for comparison (docs/perf.md, "Step plan").
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "lattn/backend.h"
#include "lattn/metadata.h"
#include "lattn/registry.h"

namespace {

using namespace lattn;

constexpr int kBlockSize = 64;

// `decodes` one-token decodes with contexts of 100..4000 tokens.
std::vector<RequestSpec> decode_batch(int decodes) {
  std::mt19937_64 rng(7);
  std::vector<RequestSpec> requests;
  int next_block = 0;
  for (int i = 0; i < decodes; ++i) {
    const int context = std::uniform_int_distribution<int>(100, 4000)(rng);
    std::vector<int32_t> table(size_t((context + 1 + kBlockSize - 1) / kBlockSize));
    for (int32_t& b : table) b = next_block++;
    requests.push_back({1, context, std::move(table)});
  }
  return requests;
}

// args: layers, decodes per step. Time per iteration = one step's planning over all layers.
void BM_DecodePlanPerStep(benchmark::State& state) {
  const int layers = int(state.range(0)), decodes = int(state.range(1));
  const auto cls = mla_decode_backend_registry().get_class("cpu");
  DecodeBackendParams params;
  params.num_heads = 16, params.scale = 0.1f, params.kv_lora_rank = 512, params.qk_rope_head_dim = 64;
  std::vector<std::unique_ptr<DecodeBackend>> backends;
  for (int l = 0; l < layers; ++l) backends.push_back(cls->create(params));
  MetadataBuilderConfig config;
  config.block_size = kBlockSize;
  config.context_chunk_workspace_size = 128 * 1024;
  const MlaMetadataBuilder builder(config);
  const std::vector<RequestSpec> requests = decode_batch(decodes);
  for (auto _ : state) {
    state.PauseTiming();
    const MlaMetadata md = builder.build(requests);  // a new step
    state.ResumeTiming();
    for (auto& b : backends) b->prepare_metadata(*md.decode);
  }
}
BENCHMARK(BM_DecodePlanPerStep)->Args({61, 32})->Args({61, 256})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
