// --verify: record sampled outputs, replay them with the reference backend.
#include "serving/verify.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>

#include "lattn/attention.h"
#include "lattn/cache.h"
#include "lattn/metadata.h"
#include "lattn/sparse.h"
#include "serving/activations.h"
#include "serving/block_allocator.h"

namespace lattn::serving {
namespace {

int32_t max_positions(const Request& r) { return r.prompt_len + r.output_len - 1; }

}  // namespace

double verify_bound(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 1e-2;
    case DType::f16:
      return 2e-3;
    default:
      return 1e-5;
  }
}

std::vector<Request> pick_verify_requests(const std::vector<Request>& trace, int count,
                                          int32_t max_num_batched_tokens) {
  std::set<int64_t> picked;
  auto shortest = [&](auto&& predicate) {
    const Request* best = nullptr;
    for (const Request& r : trace) {
      if (predicate(r) && !picked.count(r.id) &&
          (!best || r.prompt_len + r.output_len < best->prompt_len + best->output_len)) {
        best = &r;
      }
    }
    if (best && int(picked.size()) < count) picked.insert(best->id);
  };
  shortest([&](const Request& r) { return r.prompt_len > max_num_batched_tokens; });
  shortest([](const Request& r) { return r.output_len >= 2; });
  for (int i = 0; int(picked.size()) < std::min<int>(count, int(trace.size())); ++i) {
    // Evenly spread picks; on a collision walk forward to the next free request.
    size_t at = size_t(double(i) * double(trace.size()) / double(std::max(count, 1))) % trace.size();
    while (picked.count(trace[at].id)) at = (at + 1) % trace.size();
    picked.insert(trace[at].id);
  }
  std::vector<Request> sampled;
  for (const Request& r : trace) {
    if (picked.count(r.id)) sampled.push_back(r);
  }
  return sampled;
}

OutputRecorder::OutputRecorder(const VerifyConfig& config, const std::vector<Request>& sampled) : config_(config) {
  const int64_t row = int64_t(config.dims.num_heads) * config.dims.v_head_dim;
  for (const Request& r : sampled) {
    Recorded rec;
    rec.request = r;
    rec.outputs = OwnedTensor::empty({config.num_layers, max_positions(r), row}, config.dtype);
    fill_bytes(rec.outputs, 0xff);  // NaN: a position the run never produced fails the comparison
    requests_.emplace(r.id, std::move(rec));
  }
}

void OutputRecorder::record(int layer, const ScheduledRow& row, const Tensor& out_rows) {
  Recorded& rec = requests_.at(row.request_id);
  if (layer == 0) {
    if (row.num_computed_tokens == 0) rec.steps.clear();  // a (re)start after preemption recomputes everything
    rec.steps.push_back({row.query_len, row.num_computed_tokens});
  }
  const Tensor dst = rec.outputs.tensor().select(0, layer).narrow(0, row.num_computed_tokens, row.query_len);
  copy_tensor(out_rows, dst);
}

VerifiedRequest OutputRecorder::replay(const Recorded& rec) const {
  const MlaDims& dims = config_.dims;
  const Request& r = rec.request;
  VerifiedRequest result;
  result.id = r.id;
  result.prompt_len = r.prompt_len;
  result.output_len = r.output_len;
  for (const Step& s : rec.steps) {
    result.positions += s.query_len;
    if (s.query_len == 1) {
      ++result.decode_steps;
    } else {
      ++result.prefill_chunks;
      result.chunks_with_context += s.num_computed_tokens > 0;
    }
  }

  result.complete = result.positions == max_positions(r);

  const int32_t num_blocks = int32_t(blocks_for_tokens(max_positions(r), config_.block_size));
  RequestSpec spec;
  spec.block_table.resize(size_t(num_blocks));
  std::iota(spec.block_table.begin(), spec.block_table.end(), 0);  // contiguous, unlike the run's scattered blocks

  MetadataBuilderConfig builder_config;
  builder_config.block_size = config_.block_size;
  builder_config.context_chunk_workspace_size = config_.context_chunk_workspace_size;
  builder_config.num_cache_blocks = num_blocks;
  const MlaMetadataBuilder builder(builder_config);

  const ActivationSource source(config_.seed, dims);
  const int64_t out_row = int64_t(dims.num_heads) * dims.v_head_dim;
  for (int layer = 0; layer < config_.num_layers; ++layer) {
    MlaAttentionConfig attention_config;
    attention_config.dims = dims;
    attention_config.dtype = config_.dtype;
    attention_config.kv_cache_dtype = config_.kv_cache_dtype;
    attention_config.prefill_backend = "reference";
    attention_config.decode_backend = "reference";
    attention_config.block_size = config_.block_size;
    const IndexerShape& ix = config_.indexer;
    const bool sparse = ix.index_topk > 0;
    if (sparse) {
      attention_config.index_topk = ix.index_topk;
      attention_config.index_n_heads = ix.index_n_heads;
      attention_config.index_head_dim = ix.index_head_dim;
      attention_config.sparse_backend = "reference";
      attention_config.indexer_backend = "reference";
    }
    MlaAttention reference(attention_config);
    OwnedTensor weight = OwnedTensor::empty(
        {int64_t(dims.num_heads) * (dims.qk_nope_head_dim + dims.v_head_dim), dims.kv_lora_rank}, DType::f32);
    source.fill_kv_b_proj(layer, weight);
    reference.process_weights_after_loading(weight);
    OwnedLatentCache cache(num_blocks, config_.block_size, dims, config_.kv_cache_dtype, Device::cpu(),
                           config_.kv_cache_scale);
    fill_bytes(cache.cache().data, 0xff);
    OwnedIndexerKeyCache indexer_cache;
    if (sparse) {
      indexer_cache = OwnedIndexerKeyCache(num_blocks, config_.block_size, ix.index_head_dim);
      fill_bytes(indexer_cache.cache().data, 0xff);
    }

    double diff2 = 0, ref2 = 0;
    bool finite = true;
    for (const Step& s : rec.steps) {
      spec.query_len = s.query_len;
      spec.num_computed_tokens = s.num_computed_tokens;
      const MlaMetadata metadata = builder.build(std::span<const RequestSpec>(&spec, 1));
      std::vector<TokenRef> tokens(size_t(s.query_len));
      for (int32_t i = 0; i < s.query_len; ++i) tokens[size_t(i)] = {r.id, s.num_computed_tokens + i};
      OwnedTensor q = OwnedTensor::empty({s.query_len, dims.num_heads, dims.qk_head_dim()}, config_.dtype);
      OwnedTensor kv_c = OwnedTensor::empty({s.query_len, dims.kv_lora_rank}, config_.dtype);
      OwnedTensor k_pe = OwnedTensor::empty({s.query_len, dims.qk_rope_head_dim}, config_.dtype);
      source.fill_inputs(layer, tokens, q, kv_c, k_pe);
      Tensor expected;
      if (sparse) {
        OwnedTensor iq = OwnedTensor::empty({s.query_len, ix.index_n_heads, ix.index_head_dim}, config_.dtype);
        OwnedTensor ik = OwnedTensor::empty({s.query_len, ix.index_head_dim}, config_.dtype);
        OwnedTensor iw = OwnedTensor::empty({s.query_len, ix.index_n_heads}, DType::f32);
        source.fill_indexer_inputs(layer, tokens, iq, ik, iw);
        expected = reference.forward(q, kv_c, k_pe, cache, metadata,
                                     IndexerInputs{iq.tensor(), ik.tensor(), iw.tensor(), &indexer_cache.cache()});
      } else {
        expected = reference.forward(q, kv_c, k_pe, cache, metadata);
      }
      const Tensor got = rec.outputs.tensor().select(0, layer).narrow(0, s.num_computed_tokens, s.query_len);
      for (int64_t i = 0; i < int64_t(s.query_len) * out_row; ++i) {
        const double g = load_as_f32(got.data(), got.dtype(), i);
        const double e = load_as_f32(expected.data(), expected.dtype(), i);
        if (!std::isfinite(g) || !std::isfinite(e)) finite = false;
        diff2 += (g - e) * (g - e);
        ref2 += e * e;
      }
    }
    const double rel = finite ? std::sqrt(diff2 / std::max(ref2, 1e-300)) : INFINITY;
    if (layer == 0 || rel > result.worst_rel_l2) {
      result.worst_rel_l2 = rel;
      result.worst_layer = layer;
    }
    result.finite = result.finite && finite;
  }
  return result;
}

VerifyReport OutputRecorder::verify() const {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport report;
  report.bound = verify_bound(config_.dtype);
  for (const auto& [id, rec] : requests_) {
    if (rec.steps.empty()) continue;  // never ran (cannot happen in a finished run)
    const VerifiedRequest v = replay(rec);
    if (report.worst_request < 0 || v.worst_rel_l2 > report.worst_rel_l2) {
      report.worst_rel_l2 = v.worst_rel_l2;
      report.worst_request = v.id;
      report.worst_layer = v.worst_layer;
    }
    report.requests.push_back(v);
  }
  report.passed = report.worst_request >= 0 && report.worst_rel_l2 <= report.bound;
  for (const VerifiedRequest& v : report.requests) report.passed = report.passed && v.finite && v.complete;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace lattn::serving
