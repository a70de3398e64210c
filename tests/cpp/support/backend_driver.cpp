#include "support/backend_driver.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

namespace lattn::test {
namespace {

// Everything a case needs, on the host, generated from its seed.
struct CaseData {
  std::vector<CaseRequest> requests;  // decodes, then prefills
  int num_decodes = 0;
  std::vector<std::vector<int32_t>> block_tables;  // per request: its blocks, in position order
  int64_t workspace_rows = 0;                      // the context-chunk workspace the metadata plans for
  int32_t block_table_pad = 0;                     // table entries past a request's blocks
  int64_t num_blocks = 0;
  OwnedTensor weight;                       // kv_b_proj [N*(P+V), L], activation dtype
  OwnedTensor q, kv_c, k_pe;                // [T, N, P+R], [T, L], [T, R], activation dtype
  std::vector<std::vector<float>> context;  // per request [C, L+R]: the latents already cached
  OwnedTensor initial_cache;                // [num_blocks, block_size, L+R], cache dtype
};

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The value a cache entry holds for x, read back as the forward reads it.
double cache_rounded(float x, DType cache_dtype, float scale) {
  if (cache_dtype == DType::fp8_e4m3) return double(fp8e4m3_to_f32(f32_to_fp8e4m3(x / scale))) * double(scale);
  return double(round_through(x, cache_dtype));
}

// Workspace rows that hold every prefill context in one chunk.
int64_t generous_workspace(const BackendCase& c) {
  int64_t rows = c.block_size;
  for (const CaseRequest& r : c.prefills) rows += cdiv(r.context_len, c.block_size) * c.block_size;
  int64_t longest = 0;
  for (const CaseRequest& r : c.decodes) longest = std::max<int64_t>(longest, r.context_len);
  for (const CaseRequest& r : c.prefills) longest = std::max<int64_t>(longest, r.context_len);
  // The seed's share per prefill with context must reach the longest context.
  return std::max<int64_t>(rows, (cdiv(longest, c.block_size) * c.block_size) * int64_t(c.prefills.size() + 1));
}

CaseData make_case_data(const BackendCase& c) {
  CaseData data;
  std::mt19937_64 rng(c.seed);
  const MlaDims& d = c.dims;
  const int64_t N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim, R = d.qk_rope_head_dim, V = d.v_head_dim;
  data.requests = c.decodes;
  data.requests.insert(data.requests.end(), c.prefills.begin(), c.prefills.end());
  data.num_decodes = int(c.decodes.size());

  // Blocks: each request owns cdiv(seq_len, block_size) of them, a few spare
  // pages stay unused; hostile cases hand them out in random order.
  int64_t needed = 0;
  for (const CaseRequest& r : data.requests) needed += cdiv(r.context_len + r.query_len, c.block_size);
  data.num_blocks = needed + 3;
  std::vector<int32_t> pool(size_t(data.num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  if (c.hostile) std::shuffle(pool.begin(), pool.end(), rng);
  size_t next = 0;
  for (const CaseRequest& r : data.requests) {
    std::vector<int32_t> row;
    for (int64_t b = 0; b < cdiv(r.context_len + r.query_len, c.block_size); ++b) row.push_back(pool[next++]);
    data.block_tables.push_back(row);
  }
  data.workspace_rows = c.workspace_rows > 0 ? c.workspace_rows : generous_workspace(c);
  // Hostile: table columns past a request's blocks point past the cache.
  data.block_table_pad = c.hostile ? int32_t(data.num_blocks + 1000) : 0;

  // Weights and activations: N(0, 1) latents and queries, W_UK/W_UV with
  // variance 1/L, so q·k has standard deviation ~sqrt(P+R) and the softmax
  // (scale 1/sqrt(P+R)) is neither flat nor one-hot.
  const int64_t T = c.num_tokens();
  data.weight = OwnedTensor::empty({N * (P + V), L}, c.dtype);
  fill_normal(data.weight, rng, 1.f / std::sqrt(float(L)));
  data.q = OwnedTensor::empty({T, N, P + R}, c.dtype);
  data.kv_c = OwnedTensor::empty({T, L}, c.dtype);
  data.k_pe = OwnedTensor::empty({T, R}, c.dtype);
  fill_normal(data.q, rng);
  fill_normal(data.kv_c, rng);
  fill_normal(data.k_pe, rng);
  const int64_t real = T - c.pad_tokens;
  // Hostile poison: NaN bytes, or the case's poison value in every element.
  const auto poison_with = [&](const Tensor& t) {
    if (c.poison_value == 0.f) {
      poison(t);
      return;
    }
    fill(t, c.poison_value);
  };
  if (c.hostile && c.pad_tokens > 0) {  // padded rows hold garbage: it must reach neither cache nor output
    poison_with(data.q.tensor().narrow(0, real, c.pad_tokens));
    poison_with(data.kv_c.tensor().narrow(0, real, c.pad_tokens));
    poison_with(data.k_pe.tensor().narrow(0, real, c.pad_tokens));
  }

  // The cache before the step: context latents in place, everything else NaN (hostile) or 0.
  data.initial_cache = OwnedTensor::empty({data.num_blocks, c.block_size, L + R}, c.kv_cache_dtype);
  if (c.hostile) {
    poison_with(data.initial_cache.tensor());
  } else {
    fill_bytes(data.initial_cache, 0x00);
  }
  std::normal_distribution<float> normal(0.f, 1.f);
  for (size_t r = 0; r < data.requests.size(); ++r) {
    const int context = data.requests[r].context_len;
    std::vector<float> latents(size_t(context * (L + R)));
    for (float& x : latents) x = normal(rng);
    for (int j = 0; j < context; ++j) {
      const int64_t block = data.block_tables[r][size_t(j / c.block_size)];
      void* entry = data.initial_cache.tensor().ptr_at({block, j % c.block_size});
      for (int64_t e = 0; e < L + R; ++e) {
        const float x = latents[size_t(j * (L + R) + e)];
        store_from_f32(entry, c.kv_cache_dtype, e, c.kv_cache_dtype == DType::fp8_e4m3 ? x / c.cache_scale : x);
      }
    }
    data.context.push_back(std::move(latents));
  }

  // Planted non-finite values.
  std::vector<int64_t> first_row(data.requests.size() + 1, 0);
  for (size_t r = 0; r < data.requests.size(); ++r) first_row[r + 1] = first_row[r] + data.requests[r].query_len;
  for (const Plant& pl : c.plants) {
    const size_t r = size_t(pl.request);
    if (r >= data.requests.size()) throw std::runtime_error("plant: no request " + std::to_string(pl.request));
    switch (pl.where) {
      case Plant::Where::query: {
        const int64_t row = first_row[r] + pl.token;
        store_from_f32(data.q.data(), c.dtype, (row * N + pl.head) * (P + R) + pl.element, pl.value);
        break;
      }
      case Plant::Where::new_token: {
        const int64_t row = first_row[r] + pl.token;
        if (pl.element < L) {
          store_from_f32(data.kv_c.data(), c.dtype, row * L + pl.element, pl.value);
        } else {
          store_from_f32(data.k_pe.data(), c.dtype, row * R + (pl.element - L), pl.value);
        }
        break;
      }
      case Plant::Where::context_token: {
        if (pl.token >= data.requests[r].context_len) throw std::runtime_error("plant: context position out of range");
        data.context[r][size_t(pl.token * (L + R) + pl.element)] = pl.value;
        const int64_t block = data.block_tables[r][size_t(pl.token / c.block_size)];
        void* entry = data.initial_cache.tensor().ptr_at({block, pl.token % c.block_size});
        store_from_f32(entry, c.kv_cache_dtype, pl.element,
                       c.kv_cache_dtype == DType::fp8_e4m3 ? pl.value / c.cache_scale : pl.value);
        break;
      }
    }
  }
  return data;
}

// The step's metadata from MlaMetadataBuilder (host), with the hostile
// block-table padding written into the columns no request owns.
MlaMetadata build_metadata(const BackendCase& c, const CaseData& data) {
  MetadataBuilderConfig config;
  config.block_size = c.block_size;
  config.chunked_prefill_enabled = true;
  config.context_chunk_workspace_size = data.workspace_rows;
  config.num_cache_blocks = data.num_blocks;
  for (const CaseRequest& r : c.decodes)
    config.reorder_batch_threshold = std::max(config.reorder_batch_threshold, r.query_len);
  std::vector<RequestSpec> requests;
  for (size_t r = 0; r < data.requests.size(); ++r) {
    requests.push_back({data.requests[r].query_len, data.requests[r].context_len, data.block_tables[r]});
  }
  MlaMetadata md = MlaMetadataBuilder(config).build(requests);
  const Tensor& table = md.block_table_cpu;
  for (int64_t r = 0; r < table.size(0); ++r) {
    for (int64_t j = int64_t(data.block_tables[size_t(r)].size()); j < table.size(1); ++j) {
      table.data_as<int32_t>()[r * table.stride(0) + j] = data.block_table_pad;
    }
  }
  return md;
}

OwnedTensor to_device(const Tensor& host, Device device) {
  OwnedTensor t = OwnedTensor::empty(host.shape(), host.dtype(), device);
  copy_tensor(host, t.tensor());
  return t;
}

}  // namespace

int64_t BackendCase::num_tokens() const {
  int64_t t = pad_tokens;
  for (const CaseRequest& r : decodes) t += r.query_len;
  for (const CaseRequest& r : prefills) t += r.query_len;
  return t;
}

std::string BackendCase::str() const {
  std::ostringstream s;
  s << name << " {" << dims.str() << ", act " << dtype_name(dtype) << ", cache " << dtype_name(kv_cache_dtype)
    << ", block " << block_size << ", decodes (ctx+q):";
  for (const CaseRequest& r : decodes) s << " " << r.context_len << "+" << r.query_len;
  s << ", prefills (ctx+q):";
  for (const CaseRequest& r : prefills) s << " " << r.context_len << "+" << r.query_len;
  s << ", workspace " << workspace_rows << ", pad " << pad_tokens << (hostile ? ", hostile" : "");
  if (poison_value != 0.f) s << " (poison " << poison_value << ")";
  if (!plants.empty()) s << ", " << plants.size() << " planted non-finite values";
  s << (output_scale > 0 ? ", fp8 output" : "") << ", seed " << seed << "}";
  return s.str();
}

struct PreparedStep::State {
  BackendCase test_case;
  Device device;
  CaseData data;
  std::unique_ptr<MlaAttention> attention;
  OwnedLatentCache cache;
  MlaMetadata metadata;
  OwnedTensor weight, q, kv_c, k_pe, out, output_scale;
};

PreparedStep::PreparedStep(const BackendCase& c, const std::string& prefill_backend, const std::string& decode_backend,
                           Device device)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.test_case = c;
  s.device = device;
  s.data = make_case_data(c);
  const MlaDims& d = c.dims;
  int max_decode_queries = 1;
  for (const CaseRequest& r : c.decodes) max_decode_queries = std::max(max_decode_queries, r.query_len);

  MlaAttentionConfig config;
  config.dims = d;
  config.dtype = c.dtype;
  config.kv_cache_dtype = c.kv_cache_dtype;
  config.device = device;
  config.prefill_backend = prefill_backend;
  config.decode_backend = decode_backend;
  config.block_size = c.block_size;
  config.max_query_tokens_per_request = max_decode_queries;
  s.attention = std::make_unique<MlaAttention>(config);

  s.cache = OwnedLatentCache(s.data.num_blocks, c.block_size, d, c.kv_cache_dtype, device, c.cache_scale);
  copy_tensor(s.data.initial_cache.tensor(), s.cache.cache().data);
  s.metadata = build_metadata(c, s.data);
  s.metadata.to_device(device);

  s.weight = to_device(s.data.weight, device);
  s.attention->process_weights_after_loading(s.weight);
  s.q = to_device(s.data.q, device);
  s.kv_c = to_device(s.data.kv_c, device);
  s.k_pe = to_device(s.data.k_pe, device);
  const bool quantize = c.output_scale > 0;
  s.out = OwnedTensor::empty({c.num_tokens(), int64_t(d.num_heads) * d.v_head_dim},
                             quantize ? DType::fp8_e4m3 : c.dtype, device);
  if (quantize) {
    OwnedTensor host_scale = OwnedTensor::empty({1}, DType::f32);
    *host_scale.data_as<float>() = c.output_scale;
    s.output_scale = to_device(host_scale, device);
  }
}

PreparedStep::~PreparedStep() = default;
const BackendCase& PreparedStep::test_case() const { return state_->test_case; }
MlaAttention& PreparedStep::attention() { return *state_->attention; }
const LatentCache& PreparedStep::cache() const { return state_->cache.cache(); }
MlaMetadata& PreparedStep::metadata() { return state_->metadata; }
const Tensor& PreparedStep::q() const { return state_->q.tensor(); }
const Tensor& PreparedStep::kv_c() const { return state_->kv_c.tensor(); }
const Tensor& PreparedStep::k_pe() const { return state_->k_pe.tensor(); }
const Tensor& PreparedStep::out() const { return state_->out.tensor(); }
const Tensor& PreparedStep::output_scale() const { return state_->output_scale.tensor(); }

Tensor PreparedStep::forward() {
  State& s = *state_;
  poison(s.out);
  return s.attention->forward(s.q, s.kv_c, s.k_pe, s.cache, s.metadata, s.out, s.output_scale.tensor());
}

std::vector<uint8_t> PreparedStep::cache_bytes() const {
  const Tensor& data = state_->cache.cache().data;
  OwnedTensor host = OwnedTensor::empty(data.shape(), data.dtype());
  copy_tensor(data, host.tensor());
  const auto* bytes = static_cast<const uint8_t*>(host.data());
  return std::vector<uint8_t>(bytes, bytes + host.tensor().nbytes());
}

BackendRun PreparedStep::result() const { return {to_host_f32(state_->out), cache_bytes()}; }

BackendRun run_forward(const BackendCase& c, const std::string& prefill_backend, const std::string& decode_backend,
                       Device device) {
  PreparedStep step(c, prefill_backend, decode_backend, device);
  step.forward();
  return step.result();
}

OwnedTensor naive_forward(const BackendCase& c) {
  const CaseData data = make_case_data(c);
  const MlaDims& d = c.dims;
  const int64_t N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim, R = d.qk_rope_head_dim, V = d.v_head_dim;
  const double scale = d.softmax_scale();  // what MlaAttention uses when the scale is left 0
  const int64_t T = c.num_tokens();
  OwnedTensor out = OwnedTensor::zeros({T, N * V}, DType::f32);
  float* o = out.data_as<float>();
  auto value = [](const OwnedTensor& t, int64_t i) { return double(load_as_f32(t.data(), t.tensor().dtype(), i)); };

  int64_t first_row = 0;  // token row of the request's first new token
  for (size_t r = 0; r < data.requests.size(); ++r) {
    const int C = data.requests[r].context_len, S = data.requests[r].query_len;
    const bool is_decode = int(r) < data.num_decodes;
    // The latent of every key position [0, C+S): context from the cache; new
    // tokens as given — except on the decode path, which reads them back from the cache.
    std::vector<double> latent(size_t((C + S) * (L + R)));
    for (int j = 0; j < C + S; ++j) {
      for (int64_t e = 0; e < L + R; ++e) {
        double x;
        if (j < C) {
          x = cache_rounded(data.context[r][size_t(j * (L + R) + e)], c.kv_cache_dtype, c.cache_scale);
        } else {
          const int64_t row = first_row + (j - C);
          const double fresh = e < L ? value(data.kv_c, row * L + e) : value(data.k_pe, row * R + (e - L));
          x = is_decode ? cache_rounded(float(fresh), c.kv_cache_dtype, c.cache_scale) : fresh;
        }
        latent[size_t(j * (L + R) + e)] = x;
      }
    }
    for (int64_t n = 0; n < N; ++n) {
      // Up-projection of every key (docs/mla.md): k_nope = kv_c · W_UK[:, n, :], v = kv_c · W_UV[:, n, :].
      const int64_t head_row = n * (P + V);
      std::vector<double> k_nope(size_t((C + S) * P)), v(size_t((C + S) * V));
      for (int j = 0; j < C + S; ++j) {
        for (int64_t p = 0; p < P + V; ++p) {
          double acc = 0;
          for (int64_t l = 0; l < L; ++l)
            acc += value(data.weight, (head_row + p) * L + l) * latent[size_t(j * (L + R) + l)];
          if (p < P)
            k_nope[size_t(j * P + p)] = acc;
          else
            v[size_t(j * V + (p - P))] = acc;
        }
      }
      // Causal MHA: new token i sits at position C + i and sees keys [0, C + i].
      for (int i = 0; i < S; ++i) {
        const int64_t row = first_row + i;
        const int num_keys = C + i + 1;
        std::vector<double> scores(static_cast<size_t>(num_keys));
        for (int j = 0; j < num_keys; ++j) {
          double dot = 0;
          for (int64_t p = 0; p < P; ++p) dot += value(data.q, (row * N + n) * (P + R) + p) * k_nope[size_t(j * P + p)];
          for (int64_t e = 0; e < R; ++e) {
            dot += value(data.q, (row * N + n) * (P + R) + P + e) * latent[size_t(j * (L + R) + L + e)];
          }
          scores[size_t(j)] = scale * dot;
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double total = 0;
        for (double& s : scores) total += (s = std::exp(s - m));
        for (int64_t e = 0; e < V; ++e) {
          double acc = 0;
          for (int j = 0; j < num_keys; ++j) acc += scores[size_t(j)] * v[size_t(j * V + e)];
          double result = acc / total;
          if (c.output_scale > 0) result = fp8e4m3_to_f32(f32_to_fp8e4m3(float(result / c.output_scale)));
          o[row * N * V + n * V + e] = float(result);
        }
      }
    }
    first_row += S;
  }
  return out;
}

bool CaseResult::ok() const {
  return output.nan_mismatches == 0 && std::isfinite(output.rel_l2) && output.rel_l2 <= tolerance &&
         (!cache_must_match || cache_bytes_differing == 0);
}

std::string CaseResult::str() const {
  std::ostringstream s;
  s << (ok() ? "ok" : "FAILED") << ": " << case_name << " vs " << against << ": output " << output.str()
    << " (tolerance rel_l2 <= " << tolerance << ")";
  if (cache_bytes_differing >= 0) s << ", cache bytes differing: " << cache_bytes_differing;
  return s.str();
}

uint64_t hash_bytes(const Tensor& t) {
  OwnedTensor host = OwnedTensor::empty(t.shape(), t.dtype());
  copy_tensor(t, host.tensor());
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const uint8_t*>(host.data());
  for (size_t i = 0; i < host.tensor().nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

::testing::AssertionResult check(const CaseResult& result) {
  if (result.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << result.str();
}

CaseResult run_backend_case(const BackendCase& c, const std::string& prefill_backend, const std::string& decode_backend,
                            Device device) {
  const BackendRun oracle = run_forward(c, "reference", "reference", Device::cpu());
  const BackendRun got = run_forward(c, prefill_backend, decode_backend, device);
  CaseResult result;
  result.case_name = c.str() + " [" + prefill_backend + "/" + decode_backend + " on " + device_name(device) + "]";
  result.against = "reference";
  result.output = compare(got.out, oracle.out);
  result.tolerance = rel_tolerance(c.output_scale > 0 ? DType::fp8_e4m3 : c.dtype);
  result.cache_bytes_differing = 0;
  for (size_t i = 0; i < got.cache_bytes.size(); ++i)
    result.cache_bytes_differing += got.cache_bytes[i] != oracle.cache_bytes[i];
  result.cache_must_match = c.kv_cache_dtype != DType::fp8_e4m3;
  return result;
}

CaseResult run_reference_vs_naive(const BackendCase& c) {
  const BackendRun got = run_forward(c, "reference", "reference", Device::cpu());
  const OwnedTensor naive = naive_forward(c);
  CaseResult result;
  result.case_name = c.str();
  result.against = "naive f64";
  result.output = compare(got.out, naive);
  result.tolerance = rel_tolerance(c.output_scale > 0 ? DType::fp8_e4m3 : c.dtype);
  return result;
}

namespace {

BackendCase make(std::string name, MlaDims dims, std::vector<CaseRequest> decodes, std::vector<CaseRequest> prefills,
                 uint64_t seed) {
  BackendCase c;
  c.name = std::move(name);
  c.dims = dims;
  c.decodes = std::move(decodes);
  c.prefills = std::move(prefills);
  c.seed = seed;
  return c;
}

const MlaDims kSmallDeepSeek{4, 512, 128, 64, 128};  // DeepSeek per-head dims, few heads
const MlaDims kMiniCpm{3, 256, 64, 32, 64};          // kv_lora_rank 256 / rope 32 / nope 64 / v 64
const MlaDims kWideV{2, 512, 192, 64, 256};          // qk_nope 192 / v 256
const MlaDims kTiny{3, 32, 16, 8, 24};               // small, odd: V > P

std::vector<BackendCase> small_cases() {
  std::vector<BackendCase> cases;
  const std::vector<CaseRequest> mixed_decodes{{37, 1}, {0, 1}, {16, 3}, {5, 2}};
  const std::vector<CaseRequest> mixed_prefills{{0, 9}, {21, 6}, {0, 4}, {40, 13}};
  cases.push_back(make("tiny_mixed", kTiny, mixed_decodes, mixed_prefills, 11));
  cases.push_back(make("tiny_decode_only", kTiny, {{0, 1}, {50, 1}, {7, 4}}, {}, 12));
  cases.push_back(make("tiny_prefill_no_context", kTiny, {}, {{0, 17}, {0, 2}, {0, 33}}, 13));
  cases.push_back(make("tiny_prefill_context", kTiny, {}, {{30, 5}, {0, 4}, {64, 2}}, 14));
  {
    BackendCase c = make("tiny_chunked_one_page", kTiny, {{90, 1}}, {{45, 7}, {0, 3}, {70, 2}}, 15);
    c.workspace_rows = 32;  // two prefills with context: one 16-token page each per chunk
    cases.push_back(c);
  }
  {
    BackendCase c = make("tiny_block_1", kTiny, mixed_decodes, mixed_prefills, 16);
    c.block_size = 1;
    c.workspace_rows = 20;
    cases.push_back(c);
  }
  {
    BackendCase c = make("tiny_block_64", kTiny, mixed_decodes, {{0, 9}, {100, 6}, {63, 5}}, 17);
    c.block_size = 64;
    cases.push_back(c);
  }
  {
    BackendCase c = make("tiny_heads_1", MlaDims{1, 32, 16, 8, 16}, mixed_decodes, mixed_prefills, 18);
    cases.push_back(c);
  }
  {
    BackendCase c = make("tiny_f16", kTiny, mixed_decodes, mixed_prefills, 19);
    c.dtype = c.kv_cache_dtype = DType::f16;
    cases.push_back(c);
  }
  {
    BackendCase c = make("tiny_f32_act_bf16_cache", kTiny, mixed_decodes, mixed_prefills, 20);
    c.dtype = DType::f32;
    cases.push_back(c);
  }
  {
    BackendCase c = make("tiny_fp8_cache", kTiny, mixed_decodes, mixed_prefills, 21);
    c.kv_cache_dtype = DType::fp8_e4m3;
    c.cache_scale = 0.05f;
    cases.push_back(c);
  }
  {
    BackendCase c = make("tiny_f32_act_fp8_cache", kTiny, mixed_decodes, mixed_prefills, 22);
    c.dtype = DType::f32;
    c.kv_cache_dtype = DType::fp8_e4m3;
    c.cache_scale = 0.03f;
    cases.push_back(c);
  }
  {
    BackendCase c = make("tiny_padded_tokens", kTiny, mixed_decodes, mixed_prefills, 23);
    c.pad_tokens = 5;
    cases.push_back(c);
  }
  {
    BackendCase c = make("tiny_fp8_output", kTiny, mixed_decodes, mixed_prefills, 24);
    c.output_scale = 0.02f;
    cases.push_back(c);
  }
  {
    // A decode's context is longer than every prefill's: trailing chunks are
    // all empty (docs/metadata.md) and must merge to nothing.
    BackendCase c = make("tiny_empty_trailing_chunks", kTiny, {{200, 1}}, {{30, 4}, {0, 2}}, 25);
    c.workspace_rows = 32;
    cases.push_back(c);
  }
  {
    BackendCase c = make("tiny_not_hostile", kTiny, mixed_decodes, mixed_prefills, 26);
    c.hostile = false;
    cases.push_back(c);
  }
  return cases;
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
using W = Plant::Where;

// NaN and inf planted where a backend can lose them (a max that drops NaN, an
// empty-row test that reads NaN as "no key") or spread them (0 * NaN for a
// masked key): queries, cached context (one chunk and several), the last new
// tokens of prefills and of multi-token decodes, padded rows and unowned
// cache entries. Requests: 0..3 the decodes, 4..7 the prefills below.
std::vector<BackendCase> tiny_nonfinite_cases() {
  const std::vector<CaseRequest> decodes{{37, 1}, {0, 1}, {16, 3}, {5, 2}};
  const std::vector<CaseRequest> prefills{{0, 9}, {21, 6}, {0, 4}, {40, 13}};
  const int L = kTiny.kv_lora_rank, P = kTiny.qk_nope_head_dim;
  std::vector<BackendCase> cases;
  {
    BackendCase c = make("nonfinite_query", kTiny, decodes, prefills, 41);
    c.plants = {{W::query, 0, 0, 1, 3, kNaN},
                {W::query, 2, 1, 0, P + 2, kNaN},
                {W::query, 5, 2, 2, 0, kNaN},
                {W::query, 7, 12, 0, 5, kInf},
                {W::query, 4, 0, 1, 1, -kInf}};
    cases.push_back(c);
  }
  const std::vector<Plant> context{{W::context_token, 0, 5, 0, 2, kNaN},
                                   {W::context_token, 3, 4, 0, L + 1, kNaN},
                                   {W::context_token, 5, 7, 0, 0, kNaN},
                                   {W::context_token, 7, 39, 0, 10, kInf}};
  {
    BackendCase c = make("nonfinite_context", kTiny, decodes, prefills, 42);
    c.plants = context;
    cases.push_back(c);
  }
  {
    BackendCase c = make("nonfinite_context_chunked", kTiny, decodes, prefills, 43);
    c.plants = context;
    c.workspace_rows = 32;  // 16-token chunks: the planted tokens fall in different chunks
    cases.push_back(c);
  }
  // The last new token of a prefill / decode: the earlier rows must not see it.
  const std::vector<Plant> new_tokens{{W::new_token, 4, 8, 0, 0, kNaN},
                                      {W::new_token, 2, 2, 0, 0, kNaN},
                                      {W::new_token, 7, 12, 0, L + 3, kInf},
                                      {W::new_token, 5, 5, 0, 4, -kInf},
                                      {W::new_token, 3, 1, 0, 7, kInf}};
  {
    BackendCase c = make("nonfinite_new_tokens", kTiny, decodes, prefills, 44);
    c.plants = new_tokens;
    cases.push_back(c);
  }
  {
    BackendCase c = make("nonfinite_new_tokens_f16_chunked", kTiny, decodes, prefills, 45);
    c.dtype = c.kv_cache_dtype = DType::f16;
    c.plants = new_tokens;
    c.workspace_rows = 32;
    cases.push_back(c);
  }
  {
    BackendCase c = make("nonfinite_inf_poison", kTiny, decodes, prefills, 46);
    c.poison_value = kInf;  // unowned cache entries and padded rows
    c.pad_tokens = 5;
    cases.push_back(c);
  }
  {
    BackendCase c = make("nonfinite_neg_inf_poison_block_1", kTiny, decodes, prefills, 47);
    c.poison_value = -kInf;
    c.pad_tokens = 3;
    c.block_size = 1;
    c.workspace_rows = 20;
    cases.push_back(c);
  }
  return cases;
}

// The same on DeepSeek dims, where the tensor-core kernels run: decode
// requests 0..2 (the third decodes 3 tokens), prefills 3..5.
std::vector<BackendCase> deepseek_nonfinite_cases() {
  const std::vector<CaseRequest> decodes{{45, 1}, {0, 1}, {20, 3}};
  const std::vector<CaseRequest> prefills{{0, 11}, {35, 5}, {18, 4}};
  const int L = kSmallDeepSeek.kv_lora_rank, P = kSmallDeepSeek.qk_nope_head_dim;
  std::vector<BackendCase> cases;
  {
    BackendCase c = make("deepseek_nonfinite_query_context", kSmallDeepSeek, decodes, prefills, 48);
    c.plants = {{W::query, 0, 0, 2, 7, kNaN},
                {W::query, 4, 1, 1, P + 5, kNaN},
                {W::context_token, 0, 44, 0, 100, kNaN},
                {W::context_token, 4, 3, 0, L + 8, kInf},
                {W::context_token, 5, 17, 0, 3, kNaN}};
    cases.push_back(c);
  }
  {
    BackendCase c = make("deepseek_nonfinite_new_tokens", kSmallDeepSeek, decodes, prefills, 49);
    c.plants = {{W::new_token, 2, 1, 0, 5, kInf}, {W::new_token, 3, 10, 0, 0, kNaN}, {W::new_token, 5, 3, 0, 9, kInf}};
    c.block_size = 64;
    cases.push_back(c);
  }
  {
    // 32 heads x up to 3 query tokens = 96 rows per request and 64-token
    // pages: `hopper` runs its wgmma decode kernel here (it hands requests of
    // at most 16 rows, as in the 4-head cases above, to the sm80 kernels).
    BackendCase c = make("deepseek_nonfinite_h32_wgmma", MlaDims::deepseek_v3(32), decodes, prefills, 50);
    c.block_size = 64;
    c.plants = {{W::query, 0, 0, 17, 7, kNaN},
                {W::query, 2, 2, 30, P + 5, kNaN},
                {W::query, 1, 0, 3, 0, kInf},
                {W::context_token, 0, 44, 0, 100, kNaN},
                {W::context_token, 2, 3, 0, L + 8, kInf},
                {W::new_token, 2, 1, 0, 5, kInf},
                {W::new_token, 4, 4, 0, 9, kNaN}};
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

std::vector<BackendCase> nonfinite_forward_cases() {
  std::vector<BackendCase> cases = tiny_nonfinite_cases();
  for (BackendCase& c : deepseek_nonfinite_cases()) cases.push_back(std::move(c));
  return cases;
}

std::vector<BackendCase> small_forward_cases() {
  std::vector<BackendCase> cases = small_cases();
  for (BackendCase& c : tiny_nonfinite_cases()) cases.push_back(std::move(c));
  return cases;
}

std::vector<BackendCase> all_forward_cases() {
  std::vector<BackendCase> cases = small_forward_cases();
  for (BackendCase& c : deepseek_nonfinite_cases()) cases.push_back(std::move(c));
  const std::vector<CaseRequest> decodes{{45, 1}, {0, 1}, {20, 2}};
  const std::vector<CaseRequest> prefills{{0, 11}, {35, 5}, {18, 3}};
  cases.push_back(make("deepseek_mixed", kSmallDeepSeek, decodes, prefills, 31));
  {
    BackendCase c = make("deepseek_chunked_fp8", kSmallDeepSeek, decodes, prefills, 32);
    c.kv_cache_dtype = DType::fp8_e4m3;
    c.cache_scale = 0.04f;
    c.workspace_rows = 32;
    cases.push_back(c);
  }
  {
    BackendCase c =
        make("deepseek_heads_16_block_64", MlaDims::deepseek_v3(16), {{70, 1}, {3, 2}}, {{0, 6}, {66, 3}}, 33);
    c.block_size = 64;
    cases.push_back(c);
  }
  {
    // An fp8 cache on 64-token pages (hostile): `hopper` runs its key-major
    // fp8 kernel here (16 heads x 1 token: one 16-row tile; more rows go to
    // the sm80 kernel).
    BackendCase c = make("deepseek_heads_16_fp8_block_64", MlaDims::deepseek_v3(16), {{70, 1}, {3, 1}, {130, 1}},
                         {{0, 6}, {66, 3}}, 39);
    c.block_size = 64;
    c.kv_cache_dtype = DType::fp8_e4m3;
    c.cache_scale = 0.04f;
    cases.push_back(c);
  }
  {
    BackendCase c = make("deepseek_heads_128", MlaDims::deepseek_v3(128), {{19, 1}}, {{12, 3}}, 34);
    cases.push_back(c);
  }
  cases.push_back(make("minicpm_dims_mixed", kMiniCpm, decodes, prefills, 35));
  {
    BackendCase c = make("minicpm_dims_block_1_f16", kMiniCpm, {{9, 1}}, {{13, 4}}, 36);
    c.block_size = 1;
    c.dtype = c.kv_cache_dtype = DType::f16;
    c.workspace_rows = 5;
    cases.push_back(c);
  }
  cases.push_back(make("wide_v_mixed", kWideV, decodes, prefills, 37));
  {
    BackendCase c = make("wide_v_f32_fp8", kWideV, {{30, 2}}, {{25, 4}}, 38);
    c.dtype = DType::f32;
    c.kv_cache_dtype = DType::fp8_e4m3;
    c.cache_scale = 0.05f;
    cases.push_back(c);
  }
  return cases;
}

}  // namespace lattn::test
