// The serving loop: arrivals -> scheduler -> metadata -> every layer's forward.
#include "serving/engine.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <stdexcept>

#include "lattn/attention.h"
#include "lattn/cache.h"
#include "lattn/metadata.h"
#include "lattn/selector.h"
#include "lattn/sparse.h"
#include "serving/activations.h"
#include "serving/text.h"

namespace lattn::serving {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Backend names compare case-insensitively (the registry's rule).
bool same_name(const std::string& a, const std::string& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

// Why the layer runs `chosen`: an explicit request, or the selector's walk
// down its priority list (naming what it skipped and why).
std::string explain_choice(const std::string& requested, const char* env_var, const std::string& chosen,
                           const std::vector<std::string>& priorities, const std::vector<BackendVerdict>& verdicts,
                           Device device) {
  const char* env = std::getenv(env_var);
  const bool from_env = env && *env && (requested.empty() || same_name(env, requested));
  if (from_env) return std::string("requested by ") + env_var;
  if (!requested.empty()) return "requested by name";
  std::string why =
      "the selector's first valid backend for " + device_name(device) + " (priority: " + join(priorities, ", ") + ")";
  for (const std::string& name : priorities) {
    if (name == chosen) break;
    for (const BackendVerdict& v : verdicts) {
      if (v.name == name && !v.valid()) why += "; skipped " + name + ": " + join(v.reasons, ", ");
    }
  }
  return why;
}

// One more step of `label` in use.kernels; the unplanned label given before
// the run (0 steps) goes once a step has run.
void count_kernel(BackendUse& use, const std::string& label) {
  std::erase_if(use.kernels, [&label](const auto& k) { return k.second == 0 && k.first != label; });
  for (auto& k : use.kernels) {
    if (k.first == label) {
      ++k.second;
      return;
    }
  }
  use.kernels.emplace_back(label, 1);
}

}  // namespace

const std::string& BackendUse::main_kernel() const {
  static const std::string kNone;
  const std::pair<std::string, int64_t>* best = nullptr;
  for (const auto& k : kernels) {
    if (best == nullptr || k.second > best->second) best = &k;
  }
  return best ? best->first : kNone;
}

struct ServingEngine::Impl {
  struct Layer {
    MlaAttention attention;
    OwnedLatentCache cache;
    OwnedIndexerKeyCache indexer_cache;  // sparse models only
  };

  EngineConfig config;
  ActivationSource source;
  std::vector<Layer> layers;
  BackendUse prefill_use, decode_use;
  // Step inputs, sized for the token budget: host (filled) and device (used).
  OwnedTensor q_host, kv_c_host, k_pe_host;
  OwnedTensor q_device, kv_c_device, k_pe_device, out;
  OwnedTensor fence_host;  // 1 element: a device->host copy that waits for the step
  // A sparse model's indexer inputs: host (filled) and device (used).
  OwnedTensor iq_host, ik_host, iw_host, iq_device, ik_device, iw_device;

  explicit Impl(const EngineConfig& c) : config(c), source(c.seed, c.dims) {
    const MlaDims& d = c.dims;
    for (int l = 0; l < c.num_layers; ++l) {
      MlaAttentionConfig ac;
      ac.dims = d;
      ac.dtype = c.dtype;
      ac.kv_cache_dtype = c.kv_cache_dtype;
      ac.device = c.device;
      ac.prefill_backend = c.prefill_backend;
      ac.decode_backend = c.decode_backend;
      ac.block_size = c.scheduler.block_size;
      ac.index_topk = c.indexer.index_topk;
      ac.index_n_heads = c.indexer.index_n_heads;
      ac.index_head_dim = c.indexer.index_head_dim;
      ac.sparse_backend = c.sparse_backend;
      ac.indexer_backend = c.indexer_backend;
      MlaAttention attention(ac);
      OwnedTensor weight =
          OwnedTensor::empty({int64_t(d.num_heads) * (d.qk_nope_head_dim + d.v_head_dim), d.kv_lora_rank}, DType::f32);
      source.fill_kv_b_proj(l, weight);
      attention.process_weights_after_loading(weight);
      OwnedLatentCache cache(c.scheduler.num_blocks, c.scheduler.block_size, d, c.kv_cache_dtype, c.device,
                             c.kv_cache_scale);
      // NaN in every slot no request has written: a kernel that reads past a
      // sequence, or from another request's block, poisons its output.
      fill_bytes(cache.cache().data, 0xff);
      OwnedIndexerKeyCache indexer_cache;
      if (sparse()) {
        indexer_cache =
            OwnedIndexerKeyCache(c.scheduler.num_blocks, c.scheduler.block_size, c.indexer.index_head_dim, c.device);
        fill_bytes(indexer_cache.cache().data, 0xff);
      }
      layers.push_back({std::move(attention), std::move(cache), std::move(indexer_cache)});
    }

    const int64_t T = c.scheduler.max_num_batched_tokens;
    q_host = OwnedTensor::empty({T, d.num_heads, d.qk_head_dim()}, c.dtype);
    kv_c_host = OwnedTensor::empty({T, d.kv_lora_rank}, c.dtype);
    k_pe_host = OwnedTensor::empty({T, d.qk_rope_head_dim}, c.dtype);
    out = OwnedTensor::empty({T, int64_t(d.num_heads) * d.v_head_dim}, c.dtype, c.device);
    if (c.device.is_cuda()) {
      q_device = OwnedTensor::empty({T, d.num_heads, d.qk_head_dim()}, c.dtype, c.device);
      kv_c_device = OwnedTensor::empty({T, d.kv_lora_rank}, c.dtype, c.device);
      k_pe_device = OwnedTensor::empty({T, d.qk_rope_head_dim}, c.dtype, c.device);
      fence_host = OwnedTensor::empty({1}, c.dtype);
    }
    if (sparse()) {
      const int64_t H = c.indexer.index_n_heads, D = c.indexer.index_head_dim;
      iq_host = OwnedTensor::empty({T, H, D}, c.dtype);
      ik_host = OwnedTensor::empty({T, D}, c.dtype);
      iw_host = OwnedTensor::empty({T, H}, DType::f32);
      if (c.device.is_cuda()) {
        iq_device = OwnedTensor::empty({T, H, D}, c.dtype, c.device);
        ik_device = OwnedTensor::empty({T, D}, c.dtype, c.device);
        iw_device = OwnedTensor::empty({T, H}, DType::f32, c.device);
      }
      const std::string name = layers.front().attention.sparse_backend()->name();
      const std::string why =
          "sparse model (top " + std::to_string(c.indexer.index_topk) + " of " + std::to_string(H) + "x" +
          std::to_string(D) + " indexer scores): " +
          (c.sparse_backend.empty() ? "the sparse selector's first valid backend for " + device_name(c.device)
                                    : std::string("requested by name"));
      prefill_use = {name, why, 0, {{layers.front().attention.prefill_kernel_label(), 0}}};
      decode_use = {name, why, 0, {{layers.front().attention.decode_kernel_label(), 0}}};
      return;
    }

    const SelectorConfig selector =
        SelectorConfig::for_dims(d, c.dtype, c.kv_cache_dtype, c.device, c.scheduler.block_size);
    const auto capability = selector_device_capability(selector);
    const auto priorities = mla_backend_priorities(c.device, capability);
    prefill_use.name = layers.front().attention.prefill_backend().name();
    prefill_use.why = explain_choice(c.prefill_backend, kPrefillBackendEnvVar, prefill_use.name, priorities,
                                     explain_mla_prefill_backends(capability, selector), c.device);
    decode_use.name = layers.front().attention.decode_backend().name();
    decode_use.why = explain_choice(c.decode_backend, kDecodeBackendEnvVar, decode_use.name, priorities,
                                    explain_mla_decode_backends(capability, selector), c.device);
    prefill_use.kernels = {{layers.front().attention.prefill_kernel_label(), 0}};
    decode_use.kernels = {{layers.front().attention.decode_kernel_label(), 0}};
  }

  bool sparse() const { return config.indexer.index_topk > 0; }

  // Waits for the device's work so far (copy_tensor is synchronous).
  void fence() {
    if (!config.device.is_cuda()) return;
    copy_tensor(out.tensor().view({-1}).narrow(0, 0, 1), fence_host);
  }
};

ServingEngine::ServingEngine(const EngineConfig& config) {
  if (config.num_layers < 1) throw std::invalid_argument("the number of layers must be at least 1");
  config.scheduler.validate();
  impl_ = std::make_unique<Impl>(config);
}

ServingEngine::~ServingEngine() = default;

const EngineConfig& ServingEngine::config() const { return impl_->config; }
BackendUse ServingEngine::prefill_backend() const { return impl_->prefill_use; }
BackendUse ServingEngine::decode_backend() const { return impl_->decode_use; }

void ServingEngine::check_trace(const std::vector<Request>& trace) const {
  Scheduler probe(impl_->config.scheduler);
  for (const Request& r : trace) probe.add_request(r);  // throws for a request that can never fit
}

RunReport ServingEngine::run(const std::vector<Request>& trace,
                             const std::function<void(const StepStats&, const Scheduler&)>& on_step) {
  Impl& m = *impl_;
  const EngineConfig& c = m.config;
  const MlaDims& d = c.dims;
  check_trace(trace);

  int64_t max_model_len = 1;
  for (const Request& r : trace) max_model_len = std::max<int64_t>(max_model_len, int64_t(r.prompt_len) + r.output_len);
  MetadataBuilderConfig builder_config;
  builder_config.block_size = c.scheduler.block_size;
  builder_config.context_chunk_workspace_size =
      mla_context_chunk_workspace_size(max_model_len, c.scheduler.max_num_seqs, c.scheduler.block_size);
  builder_config.num_cache_blocks = c.scheduler.num_blocks;
  const MlaMetadataBuilder builder(builder_config);

  std::unique_ptr<OutputRecorder> recorder;
  if (c.verify_requests > 0) {
    VerifyConfig vc;
    vc.dims = d;
    vc.num_layers = c.num_layers;
    vc.dtype = c.dtype;
    vc.kv_cache_dtype = c.kv_cache_dtype;
    vc.kv_cache_scale = c.kv_cache_scale;
    vc.indexer = c.indexer;
    vc.block_size = c.scheduler.block_size;
    vc.context_chunk_workspace_size = builder_config.context_chunk_workspace_size;
    vc.seed = c.seed;
    recorder = std::make_unique<OutputRecorder>(
        vc, pick_verify_requests(trace, c.verify_requests, c.scheduler.max_num_batched_tokens));
  }

  RunReport report;
  report.num_requests = int64_t(trace.size());
  report.num_layers = c.num_layers;
  report.num_blocks = c.scheduler.num_blocks;
  report.block_size = c.scheduler.block_size;
  report.prefill_backend = m.prefill_use;
  report.decode_backend = m.decode_use;
  double block_utilisation_sum = 0, token_utilisation_sum = 0;

  Scheduler scheduler(c.scheduler);
  double clock = 0;
  size_t next_arrival = 0;
  std::vector<RequestSpec> specs;
  std::vector<TokenRef> tokens;
  while (true) {
    while (next_arrival < trace.size() && trace[next_arrival].arrival_s <= clock) {
      scheduler.add_request(trace[next_arrival++]);
    }
    const ScheduledBatch batch = scheduler.schedule();
    if (batch.empty()) {
      if (next_arrival < trace.size()) {
        clock = std::max(clock, trace[next_arrival].arrival_s);  // idle until the next request arrives
        continue;
      }
      if (scheduler.has_unfinished()) throw std::logic_error("the scheduler stalled with requests still unfinished");
      break;
    }

    StepStats step;
    step.index = int64_t(report.steps.size());
    step.blocks_used = scheduler.allocator().num_used();
    step.preempted = int32_t(batch.preempted.size());
    step.blocked = batch.num_blocked;
    step.decode_tokens = batch.num_decode_tokens;
    step.prefill_tokens = batch.num_prefill_tokens;
    specs.clear();
    tokens.clear();
    for (const ScheduledRow& row : batch.rows) {
      specs.push_back({row.query_len, row.num_computed_tokens, row.block_table});
      for (int32_t i = 0; i < row.query_len; ++i) tokens.push_back({row.request_id, row.num_computed_tokens + i});
      step.decodes += row.kind == RowKind::decode;
      step.prefills += row.kind == RowKind::prefill;
      step.prefills_with_context += row.kind == RowKind::prefill_with_context;
    }
    const int64_t T = int64_t(tokens.size());
    const int64_t cached = scheduler.cached_tokens() + T;
    block_utilisation_sum += double(step.blocks_used) / double(c.scheduler.num_blocks);
    token_utilisation_sum +=
        step.blocks_used ? double(cached) / (double(step.blocks_used) * c.scheduler.block_size) : 0.0;

    auto start = Clock::now();
    MlaMetadata metadata = builder.build(specs);
    metadata.to_device(c.device);
    double latency = seconds_since(start);

    const Tensor q_host = m.q_host.tensor().narrow(0, 0, T);
    const Tensor kv_c_host = m.kv_c_host.tensor().narrow(0, 0, T);
    const Tensor k_pe_host = m.k_pe_host.tensor().narrow(0, 0, T);
    const Tensor out = m.out.tensor().narrow(0, 0, T);
    for (int l = 0; l < c.num_layers; ++l) {
      // The layer's inputs (the rest of the model's work: not timed).
      m.source.fill_inputs(l, tokens, q_host, kv_c_host, k_pe_host);
      Tensor q = q_host, kv_c = kv_c_host, k_pe = k_pe_host;
      if (c.device.is_cuda()) {
        q = m.q_device.tensor().narrow(0, 0, T);
        kv_c = m.kv_c_device.tensor().narrow(0, 0, T);
        k_pe = m.k_pe_device.tensor().narrow(0, 0, T);
        copy_tensor(q_host, q);
        copy_tensor(kv_c_host, kv_c);
        copy_tensor(k_pe_host, k_pe);
      }
      IndexerInputs indexer;
      if (m.sparse()) {
        const Tensor iq_host = m.iq_host.tensor().narrow(0, 0, T), ik_host = m.ik_host.tensor().narrow(0, 0, T),
                     iw_host = m.iw_host.tensor().narrow(0, 0, T);
        m.source.fill_indexer_inputs(l, tokens, iq_host, ik_host, iw_host);
        indexer = {iq_host, ik_host, iw_host, &m.layers[size_t(l)].indexer_cache.cache()};
        if (c.device.is_cuda()) {
          indexer.q = m.iq_device.tensor().narrow(0, 0, T);
          indexer.k = m.ik_device.tensor().narrow(0, 0, T);
          indexer.weights = m.iw_device.tensor().narrow(0, 0, T);
          copy_tensor(iq_host, indexer.q);
          copy_tensor(ik_host, indexer.k);
          copy_tensor(iw_host, indexer.weights);
        }
      }
      start = Clock::now();
      if (m.sparse()) {
        m.layers[size_t(l)].attention.forward(q, kv_c, k_pe, m.layers[size_t(l)].cache, metadata, indexer, out);
      } else {
        m.layers[size_t(l)].attention.forward(q, kv_c, k_pe, m.layers[size_t(l)].cache, metadata, out);
      }
      m.fence();
      latency += seconds_since(start);

      if (recorder) {
        int64_t row_start = 0;
        for (const ScheduledRow& row : batch.rows) {
          if (recorder->records(row.request_id)) recorder->record(l, row, out.narrow(0, row_start, row.query_len));
          row_start += row.query_len;
        }
      }
    }

    if (c.virtual_clock) latency = modelled_step_seconds(c.dims, c.num_layers, specs);
    clock += latency;
    for (const int64_t id : scheduler.on_step_done(batch, clock)) {
      const RequestState& state = scheduler.request(id);
      report.time_to_first_token_s.push_back(state.first_token_s - state.request.arrival_s);
      report.request_latency_s.push_back(state.finish_s - state.request.arrival_s);
    }
    step.latency_s = latency;
    step.end_s = clock;
    step.waiting = scheduler.num_waiting();
    step.running = scheduler.num_running();
    step.finished = scheduler.num_finished();
    report.busy_s += latency;
    report.prefill_tokens += step.prefill_tokens;
    report.decode_tokens += step.decode_tokens;
    report.decode_rows += step.decodes;
    report.prefill_rows += step.prefills;
    report.prefill_with_context_rows += step.prefills_with_context;
    report.prefill_backend.steps += step.prefill_tokens > 0;
    report.decode_backend.steps += step.decodes > 0;
    // What ran, as the first layer reports it.
    const MlaAttention& first = m.layers.front().attention;
    if (step.prefill_tokens > 0) count_kernel(report.prefill_backend, first.prefill_kernel_label());
    if (step.decodes > 0) count_kernel(report.decode_backend, first.decode_kernel_label());
    report.blocked_steps += step.blocked > 0;
    report.steps.push_back(step);
    if (on_step) on_step(step, scheduler);
  }

  report.num_finished = scheduler.num_finished();
  report.end_s = clock;
  report.preemptions = scheduler.num_preemptions();
  report.peak_blocks_used = scheduler.allocator().peak_used();
  if (!report.steps.empty()) {
    report.mean_block_utilisation = block_utilisation_sum / double(report.steps.size());
    report.mean_token_utilisation = token_utilisation_sum / double(report.steps.size());
  }
  if (recorder) {
    if (c.on_verify_start) c.on_verify_start(c.verify_requests);
    report.verify = recorder->verify();
  }
  return report;
}

double modelled_step_seconds(const MlaDims& d, int num_layers, std::span<const RequestSpec> rows) {
  // Nominal costs of the size of a small CPU's (the development machine's bf16 ceiling is
  // ~0.4 TFLOP/s): the virtual schedule then batches about as a measured CPU run does.
  constexpr double kStepOverhead = 100e-6;    // metadata build and launch, per step (s)
  constexpr double kLayerOverhead = 20e-6;    // per layer (s)
  constexpr double kFlopsPerSecond = 2.5e11;  // nominal
  const double N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim, R = d.qk_rope_head_dim, V = d.v_head_dim;
  double flops = 0;
  for (const RequestSpec& r : rows) {
    const double q = r.query_len, ctx = r.num_computed_tokens;
    if (r.query_len == 1) {
      // Absorbed decode: q_nope.W_UK_T, attention over L+R keys with L values, .W_UV.
      flops += 2 * N * (P * L + (ctx + 1) * (2 * L + R) + L * V);
    } else {
      // Prefill: up-project every key (new and context) and attend in P+R / V, causal among the new.
      flops += 2 * N * (q + ctx) * L * (P + V) + 2 * N * q * (ctx + (q + 1) / 2) * (P + R + V);
    }
  }
  return kStepOverhead + num_layers * (kLayerOverhead + flops / kFlopsPerSecond);  // flops: one layer's
}

}  // namespace lattn::serving
