// Inputs, metadata and backend of a benchmark case (see case_step.h).
#include "harness/case_step.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "lattn/backend.h"
#include "lattn/cache.h"
#include "lattn/metadata.h"
#include "lattn/ops.h"
#include "lattn/registry.h"
#include "lattn/tensor.h"

namespace lattn::bench {
namespace {

// Random values in [lo, hi) of any floating dtype on any device: generated on
// the host, copied over.
OwnedTensor random_tensor(std::initializer_list<int64_t> shape, DType dtype, Device device, std::mt19937_64& rng,
                          float lo = -1.f, float hi = 1.f) {
  OwnedTensor host = OwnedTensor::empty(shape, dtype);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < host.tensor().numel(); ++i) store_from_f32(host.data(), dtype, i, dist(rng));
  if (device.is_cpu()) return host;
  OwnedTensor dev = OwnedTensor::empty(shape, dtype, device);
  copy_tensor(host, dev);
  return dev;
}

// An int32 index array with its host view and its copy on the device (the
// same storage on the CPU), as the metadata views want them.
struct IndexArray {
  OwnedTensor host, dev;
  IndexArray(const std::vector<int32_t>& values, std::initializer_list<int64_t> shape, Device device) {
    host = OwnedTensor::empty(shape, DType::i32);
    std::copy(values.begin(), values.end(), host.data_as<int32_t>());
    if (!device.is_cpu()) {
      dev = OwnedTensor::empty(shape, DType::i32, device);
      copy_tensor(host, dev);
    }
  }
  const Tensor& cpu() const { return host.tensor(); }
  const Tensor& on_device() const { return dev.tensor().defined() ? dev.tensor() : host.tensor(); }
};

std::vector<int32_t> offsets(int count, int each) {
  std::vector<int32_t> o(static_cast<size_t>(count) + 1);
  for (int i = 0; i <= count; ++i) o[size_t(i)] = i * each;
  return o;
}

struct PrefillInputs {
  OwnedTensor q, k, v, out, lse;                  // new tokens: [T, N, Dqk], [T, N, Dqk], [T, N, V], [T, N, V], [N, T]
  OwnedTensor k_ctx, v_ctx;                       // the gathered context chunk (the forward's workspace)
  OwnedTensor prefix_out, chunk_out, merged_out;  // [T, N, V]: merged chunks so far, this chunk, final
  OwnedTensor prefix_lse[2], chunk_lse;           // [N, T]; the merged LSE alternates (it may not alias)
  std::vector<IndexArray> arrays;
  PrefillMetadata md;
  std::unique_ptr<PrefillBackend> backend;
};

CaseStep prefill_step(const BenchCase& c, std::mt19937_64& rng) {
  auto in = std::make_shared<PrefillInputs>();
  const MlaDims& d = c.dims;
  const int64_t t = int64_t(c.batch) * c.query_len, n = d.num_heads, dqk = d.qk_head_dim(), dv = d.v_head_dim;
  in->q = random_tensor({t, n, dqk}, c.dtype, c.device, rng);
  in->k = random_tensor({t, n, dqk}, c.dtype, c.device, rng);
  in->v = random_tensor({t, n, dv}, c.dtype, c.device, rng);
  in->out = OwnedTensor::empty({t, n, dv}, c.dtype, c.device);
  in->lse = OwnedTensor::empty({n, t}, DType::f32, c.device);

  // Context chunks of equal length per request (the last one shorter).
  const int chunk_len = c.context_chunks ? (c.context_len + c.context_chunks - 1) / c.context_chunks : 0;
  std::vector<int32_t> cu, starts;
  std::vector<int32_t> seq_tot, max_seq;
  for (int i = 0; i < c.context_chunks; ++i) {
    const int len = std::min(chunk_len, c.context_len - i * chunk_len);
    const std::vector<int32_t> o = offsets(c.batch, len);
    cu.insert(cu.end(), o.begin(), o.end());
    for (int r = 0; r < c.batch; ++r) starts.push_back(i * chunk_len);
    seq_tot.push_back(c.batch * len);
    max_seq.push_back(len);
  }
  if (c.context_chunks) {
    const int64_t rows = int64_t(c.batch) * chunk_len;
    in->k_ctx = random_tensor({rows, n, dqk}, c.dtype, c.device, rng);
    in->v_ctx = random_tensor({rows, n, dv}, c.dtype, c.device, rng);
    in->prefix_out = OwnedTensor::empty({t, n, dv}, c.dtype, c.device);
    in->chunk_out = OwnedTensor::empty({t, n, dv}, c.dtype, c.device);
    in->merged_out = OwnedTensor::empty({t, n, dv}, c.dtype, c.device);
    in->prefix_lse[0] = OwnedTensor::empty({n, t}, DType::f32, c.device);
    in->prefix_lse[1] = OwnedTensor::empty({n, t}, DType::f32, c.device);
    in->chunk_lse = OwnedTensor::empty({n, t}, DType::f32, c.device);
  }

  in->arrays.reserve(8);
  const auto add = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) -> const IndexArray& {
    return in->arrays.emplace_back(v, shape, c.device);
  };
  PrefillMetadata& md = in->md;
  md.num_prefills = c.batch;
  md.num_prefill_tokens = int(t);
  md.max_query_len = c.query_len;
  md.max_prefill_seq_len = c.query_len + c.context_len;
  const IndexArray& qsl = add(offsets(c.batch, c.query_len), {c.batch + 1});
  md.query_start_loc_cpu = qsl.cpu();
  md.query_start_loc = qsl.on_device();
  const IndexArray& seq = add(std::vector<int32_t>(size_t(c.batch), c.query_len + c.context_len), {c.batch});
  md.seq_lens_cpu = seq.cpu();
  md.seq_lens = seq.on_device();
  const IndexArray& ctx = add(std::vector<int32_t>(size_t(c.batch), c.context_len), {c.batch});
  md.context_lens_cpu = ctx.cpu();
  md.context_lens = ctx.on_device();
  if (c.context_chunks) {
    md.chunks.num_chunks = c.context_chunks;
    md.chunks.max_context_chunk = chunk_len;
    const IndexArray& cua = add(cu, {c.context_chunks, c.batch + 1});
    md.chunks.cu_seq_lens_cpu = cua.cpu();
    md.chunks.cu_seq_lens = cua.on_device();
    const IndexArray& st = add(starts, {c.context_chunks, c.batch});
    md.chunks.starts_cpu = st.cpu();
    md.chunks.starts = st.on_device();
    md.chunks.seq_tot = seq_tot;
    md.chunks.max_seq_lens = max_seq;
  }

  PrefillBackendParams params;
  params.num_heads = d.num_heads;
  params.scale = 1.f / std::sqrt(float(dqk));
  params.kv_lora_rank = d.kv_lora_rank;
  params.qk_nope_head_dim = d.qk_nope_head_dim;
  params.qk_rope_head_dim = d.qk_rope_head_dim;
  params.v_head_dim = d.v_head_dim;
  params.dtype = c.dtype;
  params.context.device = c.device;
  params.context.num_threads = c.num_threads;
  params.context.batch_invariant = c.batch_invariant;
  in->backend = mla_prefill_backend_registry().get_class(c.backend)->create(params);

  // As MlaAttention's chunked prefill does it: chunk 0 starts the prefix,
  // each later chunk is merged into it, and the prefix is merged with the
  // new tokens' attention at the end (the gathers and up-projections that
  // fill the workspace are not part of the attention and not timed).
  CaseStep step;
  step.kernel_label = [in]() { return in->backend->kernel_label(); };
  step.output = [in]() { return in->md.chunks.num_chunks > 0 ? in->merged_out.tensor() : in->out.tensor(); };
  step.run = [in]() {
    PrefillBackend& b = *in->backend;
    b.prepare_metadata(in->md);
    b.run_prefill_new_tokens(in->q, in->k, in->v, true, in->out, in->lse);
    const int chunks = in->md.chunks.num_chunks;
    for (int i = 0; i < chunks; ++i) {
      const int64_t rows = in->md.chunks.seq_tot[size_t(i)];
      const Tensor k = in->k_ctx.tensor().narrow(0, 0, rows), v = in->v_ctx.tensor().narrow(0, 0, rows);
      if (i == 0) {
        b.run_prefill_context_chunk(i, in->q, k, v, in->prefix_out, in->prefix_lse[0]);
        continue;
      }
      b.run_prefill_context_chunk(i, in->q, k, v, in->chunk_out, in->chunk_lse);
      merge_attn_states(in->prefix_out, in->prefix_lse[i % 2], in->prefix_out, in->prefix_lse[(i - 1) % 2],
                        in->chunk_out, in->chunk_lse);
    }
    if (chunks > 0) {
      merge_attn_states(in->merged_out, Tensor(), in->prefix_out, in->prefix_lse[(chunks - 1) % 2], in->out, in->lse);
    }
  };
  return step;
}

struct DecodeInputs {
  OwnedLatentCache cache;
  OwnedTensor ql_nope, q_pe, out, lse;
  std::vector<IndexArray> arrays;
  DecodeMetadata md;
  std::unique_ptr<DecodeBackend> backend;
};

CaseStep decode_step(const BenchCase& c, std::mt19937_64& rng) {
  auto in = std::make_shared<DecodeInputs>();
  const MlaDims& d = c.dims;
  const int blocks_per_request = (c.seq_len + c.block_size - 1) / c.block_size;
  const int num_blocks = c.batch * blocks_per_request + 1;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);  // a long-running server's scattered pages
  std::vector<int32_t> table(ids.begin(), ids.begin() + int64_t(c.batch) * blocks_per_request);

  const float cache_scale = c.kv_cache_dtype == DType::fp8_e4m3 ? 1.f / 64 : 1.f;
  in->cache = OwnedLatentCache(num_blocks, c.block_size, d, c.kv_cache_dtype, c.device, cache_scale);
  {
    const Tensor& data = in->cache.cache().data;
    OwnedTensor host = random_tensor({data.size(0), data.size(1), data.size(2)}, c.kv_cache_dtype, Device::cpu(), rng,
                                     -1.f / cache_scale, 1.f / cache_scale);
    copy_tensor(host, data);
  }
  const int64_t t = int64_t(c.batch) * c.query_len, n = d.num_heads;
  in->ql_nope = random_tensor({t, n, d.kv_lora_rank}, c.dtype, c.device, rng);
  in->q_pe = random_tensor({t, n, d.qk_rope_head_dim}, c.dtype, c.device, rng);
  in->out = OwnedTensor::empty({t, n, d.kv_lora_rank}, c.dtype, c.device);
  in->lse = OwnedTensor::empty({n, t}, DType::f32, c.device);

  DecodeMetadata& md = in->md;
  md.num_decodes = c.batch;
  md.num_decode_tokens = int(t);
  md.max_decode_query_len = c.query_len;
  md.max_decode_seq_len = c.seq_len;
  md.block_size = c.block_size;
  in->arrays.reserve(3);
  const IndexArray& qsl =
      in->arrays.emplace_back(offsets(c.batch, c.query_len), std::initializer_list<int64_t>{c.batch + 1}, c.device);
  md.query_start_loc_cpu = qsl.cpu();
  md.query_start_loc = qsl.on_device();
  const IndexArray& seq = in->arrays.emplace_back(std::vector<int32_t>(size_t(c.batch), c.seq_len),
                                                  std::initializer_list<int64_t>{c.batch}, c.device);
  md.seq_lens_cpu = seq.cpu();
  md.seq_lens = seq.on_device();
  const IndexArray& bt =
      in->arrays.emplace_back(table, std::initializer_list<int64_t>{c.batch, blocks_per_request}, c.device);
  md.block_table_cpu = bt.cpu();
  md.block_table = bt.on_device();

  DecodeBackendParams params;
  params.num_heads = d.num_heads;
  params.scale = d.softmax_scale();
  params.kv_lora_rank = d.kv_lora_rank;
  params.qk_rope_head_dim = d.qk_rope_head_dim;
  params.dtype = c.dtype;
  params.kv_cache_dtype = c.kv_cache_dtype;
  params.context.device = c.device;
  params.context.num_threads = c.num_threads;
  params.context.batch_invariant = c.batch_invariant;
  in->backend = mla_decode_backend_registry().get_class(c.backend)->create(params);

  CaseStep step;
  step.kernel_label = [in]() { return in->backend->kernel_label(); };
  step.output = [in]() { return in->out.tensor(); };
  step.run = [in]() {
    in->backend->prepare_metadata(in->md);
    in->backend->run(in->ql_nope, in->q_pe, in->cache.cache(), in->md, in->out, in->lse);
  };
  return step;
}

}  // namespace

CaseStep build_case(const BenchCase& c, uint64_t seed) {
  c.validate();
  std::mt19937_64 rng(seed);
  return c.phase == Phase::prefill ? prefill_step(c, rng) : decode_step(c, rng);
}

std::function<void()> build_case_step(const BenchCase& c, uint64_t seed) { return build_case(c, seed).run; }

}  // namespace lattn::bench
