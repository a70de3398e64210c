// `lattn run --dcp N` / `lattn bench --dcp N` (tools/dcp_run.h): prefill and
// decode steps under decode context parallelism, one thread per rank.
#include "dcp_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <random>
#include <thread>

#include "exit_codes.h"
#include "lattn/attention.h"
#include "lattn/cache.h"
#include "lattn/communicator.h"
#include "lattn/ops.h"
#include "serving/verify.h"

namespace lattn::cli {
namespace {

// Host data every rank sees (the same seed): the weight, each request's
// context latents, each step's new tokens and queries. Every request of a
// step has `len` new tokens at global positions [start, start + len):
// prefill steps (--dcp-prefill-chunk) first, then the decode steps (len 1).
struct StepInputs {
  OwnedTensor q, kv_c, k_pe;  // [B*len, N, P+R], [B*len, L], [B*len, R] activation dtype, host (request-major)
  int start = 0, len = 1;
};

OwnedTensor random_host(std::initializer_list<int64_t> shape, DType dtype, std::mt19937_64& rng, float amp) {
  OwnedTensor f = OwnedTensor::empty(shape, DType::f32);
  std::uniform_real_distribution<float> u(-amp, amp);
  auto* p = f.data_as<float>();
  for (int64_t i = 0; i < f.tensor().numel(); ++i) p[i] = u(rng);
  OwnedTensor t = OwnedTensor::empty(shape, dtype);
  copy_host(f, t);
  return t;
}

OwnedTensor to(const Tensor& host, Device device) {
  OwnedTensor t = OwnedTensor::empty(host.shape(), host.dtype(), device);
  copy_tensor(host, t);
  return t;
}

// One rank's state: its layer, its cache (its shard of every request), block tables.
struct Rank {
  std::unique_ptr<MlaAttention> layer;
  std::unique_ptr<OwnedLatentCache> cache;
  std::vector<std::vector<int32_t>> tables;  // per request, local blocks
  OwnedTensor out;                           // [B * longest step, N*V] on the rank's device
};

struct Shared {
  const LayerSetup& layer;
  const DcpRunOptions& o;
  OwnedTensor weight;                       // kv_b_proj [N*(P+V), L]
  std::vector<OwnedTensor> ctx_kv, ctx_pe;  // per request [max(context,1), L], [.., R]
  std::vector<StepInputs> steps;            // prefill steps, then decode steps
  int prefill_steps = 0;
  int64_t max_step_rows = 0;  // B * the longest step's len
};

// Builds rank `dcp.rank`'s layer and cache on `device` (world 1: the whole cache).
Rank make_rank(const Shared& s, const DcpConfig& dcp, Device device, Communicator* comm) {
  const MlaDims& d = s.layer.dims;
  const int B = s.o.num_requests, bs = s.layer.block_size;
  Rank r;
  MlaAttentionConfig c;
  c.dims = d;
  c.dtype = s.layer.dtype;
  c.kv_cache_dtype = s.layer.kv_cache_dtype;
  c.device = device;
  c.block_size = bs;
  c.prefill_backend = s.layer.prefill_backend;
  c.decode_backend = s.layer.decode_backend;
  r.layer = std::make_unique<MlaAttention>(c);
  r.layer->process_weights_after_loading(s.weight);
  if (comm) r.layer->set_dcp(comm, dcp.interleave, s.o.method);
  const int64_t total = int64_t(s.o.context) + s.o.steps;
  const int64_t local = dcp_local_count(dcp, total);
  const int64_t per_req = (local + bs - 1) / bs;
  const int64_t blocks = std::max<int64_t>(1, per_req * B);
  r.cache = std::make_unique<OwnedLatentCache>(blocks, bs, d, s.layer.kv_cache_dtype, device,
                                               s.layer.kv_cache_dtype == DType::fp8_e4m3 ? 0.05f : 1.f);
  // Blocks in a shuffled order (as a block allocator hands them out).
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 shuffle(s.o.seed + 17 + uint64_t(dcp.rank));
  std::shuffle(ids.begin(), ids.end(), shuffle);
  for (int b = 0; b < B; ++b) r.tables.emplace_back(ids.begin() + b * per_req, ids.begin() + (b + 1) * per_req);
  // The context this rank owns, at its local slots (unless the prefill steps write it).
  for (int b = 0; b < B && s.o.context > 0 && s.o.prefill_chunk == 0; ++b) {
    OwnedTensor slots = OwnedTensor::empty({s.o.context}, DType::i64);
    auto* sp = slots.data_as<int64_t>();
    for (int64_t p = 0; p < s.o.context; ++p) {
      sp[p] = PAD_SLOT_ID;
      if (dcp_owner(dcp, p) != dcp.rank) continue;
      const int64_t lp = dcp_local_position(dcp, p);
      sp[p] = int64_t(r.tables[size_t(b)][size_t(lp / bs)]) * bs + lp % bs;
    }
    concat_and_cache_mla(to(s.ctx_kv[size_t(b)], device), to(s.ctx_pe[size_t(b)], device), *r.cache, to(slots, device));
  }
  r.out = OwnedTensor::empty({s.max_step_rows, int64_t(d.num_heads) * d.v_head_dim}, s.layer.dtype, device);
  return r;
}

std::vector<RequestSpec> step_requests(const Shared& s, const Rank& r, int step) {
  const StepInputs& in = s.steps[size_t(step)];
  std::vector<RequestSpec> specs;
  for (int b = 0; b < s.o.num_requests; ++b)
    specs.push_back({.query_len = in.len, .num_computed_tokens = in.start, .block_table = r.tables[size_t(b)]});
  return specs;
}

// Rows [start, start + len) of every request's context latents, request-major.
OwnedTensor context_rows(const std::vector<OwnedTensor>& per_request, int start, int len) {
  const int B = int(per_request.size());
  const int64_t width = per_request[0].tensor().size(1);
  OwnedTensor t = OwnedTensor::empty({int64_t(B) * len, width}, per_request[0].tensor().dtype());
  const size_t row_bytes = size_t(width) * size_t(dtype_size(t.tensor().dtype()));
  for (int b = 0; b < B; ++b) {
    std::memcpy(static_cast<char*>(t.data()) + size_t(b) * size_t(len) * row_bytes,
                static_cast<const char*>(per_request[size_t(b)].data()) + size_t(start) * row_bytes,
                size_t(len) * row_bytes);
  }
  return t;
}

MlaMetadataBuilder make_builder(const LayerSetup& layer, const DcpRunOptions& o) {
  MetadataBuilderConfig bc;
  bc.block_size = layer.block_size;
  bc.chunked_prefill_enabled = o.prefill_chunk > 0;
  if (o.prefill_chunk > 0) {
    // The context gather workspace: every request's context at once, at most
    // 64k rows (longer contexts are attended chunk by chunk), at least a block each.
    const int64_t bs = layer.block_size;
    const int64_t per_request = (int64_t(o.context) + bs - 1) / bs * bs;
    bc.context_chunk_workspace_size =
        std::max<int64_t>(std::min<int64_t>(per_request * o.num_requests, 65536), bs * o.num_requests);
  }
  return MlaMetadataBuilder(bc);
}

double rel_l2(const Tensor& got, const Tensor& ref) {
  OwnedTensor g = OwnedTensor::empty(got.shape(), DType::f32), f = OwnedTensor::empty(ref.shape(), DType::f32);
  copy_host(got, g);
  copy_host(ref, f);
  double num = 0, den = 0;
  for (int64_t i = 0; i < g.tensor().numel(); ++i) {
    const double a = g.data_as<float>()[i], b = f.data_as<float>()[i];
    if (!std::isfinite(a)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace

DcpCombineMethod parse_dcp_combine(const std::string& text) {
  if (text == "ag-rs") return DcpCombineMethod::all_gather_reduce_scatter;
  if (text == "all-to-all") return DcpCombineMethod::all_to_all;
  throw CliError(kExitUsage, "--dcp-combine must be ag-rs or all-to-all; got '" + text + "'");
}

const char* dcp_combine_name(DcpCombineMethod method) {
  return method == DcpCombineMethod::all_to_all ? "all-to-all" : "ag-rs";
}

DcpRunReport run_dcp_decode(const LayerSetup& layer, const DcpRunOptions& o) {
  const int W = o.world;
  if (W < 1) throw CliError(kExitUsage, "--dcp must be at least 1, got " + std::to_string(W));
  if (o.interleave < 1)
    throw CliError(kExitUsage, "--dcp-interleave must be at least 1, got " + std::to_string(o.interleave));
  if (o.num_requests < 1 || o.context < 0 || o.steps < 1 || o.prefill_chunk < 0) {
    throw CliError(kExitUsage,
                   "--dcp runs need --num-requests >= 1, --dcp-context >= 0, --dcp-steps >= 1 and "
                   "--dcp-prefill-chunk >= 0");
  }
  const bool gpu = layer.device.is_cuda();
  if (gpu) {
    const int gpus = int(query_cuda_devices().devices.size());
    if (gpus < W) {
      throw CliError(kExitNoBackend, "--dcp " + std::to_string(W) + " on CUDA needs " + std::to_string(W) +
                                         " GPUs (one per rank); this machine has " + std::to_string(gpus) +
                                         " (use --device cpu for threads with the in-process communicator)");
    }
    if (!nccl_available()) {
      throw CliError(kExitNoBackend,
                     "--dcp on CUDA needs NCCL (libnccl.so.2, and lattn built with nccl.h); it is "
                     "not available here");
    }
  }
  const MlaDims& d = layer.dims;
  const int B = o.num_requests;
  std::mt19937_64 rng(o.seed);
  Shared s{
      layer,
      o,
      random_host({int64_t(d.num_heads) * (d.qk_nope_head_dim + d.v_head_dim), d.kv_lora_rank}, layer.dtype, rng, 0.1f),
      {},
      {},
      {},
      0,
      0};
  for (int b = 0; b < B; ++b) {
    s.ctx_kv.push_back(random_host({std::max(o.context, 1), d.kv_lora_rank}, layer.dtype, rng, 1.f));
    s.ctx_pe.push_back(random_host({std::max(o.context, 1), d.qk_rope_head_dim}, layer.dtype, rng, 1.f));
  }
  const int64_t qk = d.qk_nope_head_dim + d.qk_rope_head_dim;
  for (int start = 0; o.prefill_chunk > 0 && start < o.context; start += o.prefill_chunk) {
    const int len = std::min(o.prefill_chunk, o.context - start);
    s.steps.push_back({random_host({int64_t(B) * len, d.num_heads, qk}, layer.dtype, rng, 1.f),
                       context_rows(s.ctx_kv, start, len), context_rows(s.ctx_pe, start, len), start, len});
    ++s.prefill_steps;
  }
  for (int i = 0; i < o.steps; ++i) {
    s.steps.push_back({random_host({B, d.num_heads, qk}, layer.dtype, rng, 1.f),
                       random_host({B, d.kv_lora_rank}, layer.dtype, rng, 1.f),
                       random_host({B, d.qk_rope_head_dim}, layer.dtype, rng, 1.f), o.context + i, 1});
  }
  for (const StepInputs& in : s.steps) s.max_step_rows = std::max<int64_t>(s.max_step_rows, int64_t(B) * in.len);
  const int num_steps = int(s.steps.size());
  const MlaMetadataBuilder builder = make_builder(layer, o);

  DcpRunReport report;
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<size_t>(W));
  NcclUniqueIdBytes id{};
  if (gpu) {
    id = nccl_unique_id();
    report.communicator = "nccl";
  } else {
    comms = make_in_process_group(W);
    report.communicator = "in-process";
  }
  // outputs[step][rank] on the host, for --verify.
  std::vector<std::vector<OwnedTensor>> outputs(static_cast<size_t>(num_steps));
  for (auto& step : outputs) step.resize(static_cast<size_t>(W));
  std::vector<std::vector<double>> times(static_cast<size_t>(W), std::vector<double>(static_cast<size_t>(num_steps)));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(W));
  std::vector<std::string> backend(static_cast<size_t>(W));
  std::vector<std::thread> threads;
  for (int r = 0; r < W; ++r) {
    threads.emplace_back([&, r] {
      try {
        const Device dev = gpu ? Device::cuda(r) : Device::cpu();
        if (gpu) comms[size_t(r)] = make_nccl_communicator(id, W, r, dev);
        Communicator& comm = *comms[size_t(r)];
        const DcpConfig dcp{W, r, o.interleave};
        Rank rank = make_rank(s, dcp, dev, &comm);
        backend[size_t(r)] = rank.layer->decode_backend().name();
        for (int i = 0; i < num_steps; ++i) {
          const StepInputs& in = s.steps[size_t(i)];
          const OwnedTensor q = to(in.q, dev), kv = to(in.kv_c, dev), pe = to(in.k_pe, dev);
          const DcpDecodePlan plan = build_dcp_metadata(builder, step_requests(s, rank, i), dcp, dev);
          const Tensor out = rank.out.tensor().narrow(0, 0, int64_t(B) * in.len);
          comm.barrier();
          const auto t0 = std::chrono::steady_clock::now();
          rank.layer->forward(q, kv, pe, *rank.cache, plan, out);
          comm.barrier();  // the step is over when every rank's output is complete
          times[size_t(r)][size_t(i)] =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          if (o.verify) {
            outputs[size_t(i)][size_t(r)] = OwnedTensor::empty(out.shape(), layer.dtype);
            copy_tensor(out, outputs[size_t(i)][size_t(r)]);
          }
        }
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  report.decode_backend = backend[0];
  report.prefill_steps = s.prefill_steps;
  for (int i = 0; i < num_steps; ++i) {
    double worst = 0;
    for (int r = 0; r < W; ++r) worst = std::max(worst, times[size_t(r)][size_t(i)]);
    if (i < s.prefill_steps) {
      report.prefill_ms += worst;
    } else {
      report.step_ms.push_back(worst);
    }
  }
  std::vector<double> sorted = report.step_ms;
  std::sort(sorted.begin(), sorted.end());
  report.median_step_ms = sorted[sorted.size() / 2];

  if (o.verify) {
    // The same steps on one rank (world 1, no communicator) with the whole cache.
    const Device dev = gpu ? Device::cuda(0) : Device::cpu();
    const DcpConfig one{};
    Rank single = make_rank(s, one, dev, nullptr);
    report.verified = true;
    report.bound = serving::verify_bound(layer.dtype);
    for (int i = 0; i < num_steps; ++i) {
      const StepInputs& in = s.steps[size_t(i)];
      MlaMetadata md = builder.build(step_requests(s, single, i));
      if (gpu) md.to_device(dev);
      const Tensor out = single.out.tensor().narrow(0, 0, int64_t(B) * in.len);
      single.layer->forward(to(in.q, dev), to(in.kv_c, dev), to(in.k_pe, dev), *single.cache, md, out);
      OwnedTensor ref = OwnedTensor::empty(out.shape(), layer.dtype);
      copy_tensor(out, ref);
      for (int r = 0; r < W; ++r) {
        const double e = rel_l2(outputs[size_t(i)][size_t(r)], ref);
        if (report.worst_step < 0 || !(e <= report.worst_rel_l2)) {
          report.worst_rel_l2 = e;
          report.worst_step = i;
          report.worst_rank = r;
        }
      }
    }
    report.passed = report.worst_rel_l2 <= report.bound;
  }
  return report;
}

void print_dcp_report(const LayerSetup& layer, const DcpRunOptions& o, const DcpRunReport& r) {
  const MlaDims& d = layer.dims;
  std::printf("DCP decode: %d rank(s) (%s%s), interleave %d, combine %s\n", o.world, r.communicator.c_str(),
              r.communicator == "nccl" ? ", one GPU each" : ", one thread each", o.interleave,
              dcp_combine_name(o.method));
  std::printf(
      "layer: %s tp %d -> %d heads per rank, L %d, P %d, R %d, V %d, %s, cache %s, block %d, decode backend %s\n",
      layer.model.c_str(), layer.tp, d.num_heads, d.kv_lora_rank, d.qk_nope_head_dim, d.qk_rope_head_dim, d.v_head_dim,
      dtype_flag_name(layer.dtype), dtype_flag_name(layer.kv_cache_dtype), layer.block_size, r.decode_backend.c_str());
  std::printf("requests %d, context %d tokens (each rank holds ~%lld), %d decode steps; median step %.3f ms\n",
              o.num_requests, o.context, (long long)dcp_local_count(DcpConfig{o.world, 0, o.interleave}, o.context),
              o.steps, r.median_step_ms);
  if (r.prefill_steps > 0) {
    std::printf("context prefilled through the layer under DCP: %d steps of up to %d tokens per request, %.3f ms\n",
                r.prefill_steps, o.prefill_chunk, r.prefill_ms);
  }
  if (r.verified) {
    std::printf("verify: worst rel l2 %.3e against one rank (step %d%s, rank %d), bound %.0e: %s\n", r.worst_rel_l2,
                r.worst_step, r.worst_step < r.prefill_steps ? ", a prefill step" : "", r.worst_rank, r.bound,
                r.passed ? "PASS" : "FAIL");
  }
}

nlohmann::ordered_json dcp_report_json(const LayerSetup& layer, const DcpRunOptions& o, const DcpRunReport& r) {
  nlohmann::ordered_json j = {{"dcp", o.world},
                              {"communicator", r.communicator},
                              {"interleave", o.interleave},
                              {"combine", dcp_combine_name(o.method)},
                              {"model", layer.model},
                              {"tp", layer.tp},
                              {"num_heads", layer.dims.num_heads},
                              {"device", device_name(layer.device)},
                              {"decode_backend", r.decode_backend},
                              {"num_requests", o.num_requests},
                              {"context", o.context},
                              {"steps", o.steps},
                              {"prefill_chunk", o.prefill_chunk},
                              {"prefill_steps", r.prefill_steps},
                              {"prefill_ms", r.prefill_ms},
                              {"step_ms", r.step_ms},
                              {"median_step_ms", r.median_step_ms}};
  if (r.verified) {
    j["verify"] = {{"passed", r.passed},
                   {"worst_rel_l2", r.worst_rel_l2},
                   {"bound", r.bound},
                   {"worst_step", r.worst_step},
                   {"worst_rank", r.worst_rank}};
  }
  return j;
}

}  // namespace lattn::cli
