// The cost of the batch-invariant decode (docs/mla.md, "Batch invariance")
// against the default mode, on one set of inputs per shape: what `lattn bench
// --phase decode [--batch-invariant]` times (prepare_metadata + run of a
// decode backend, CUDA events on the default stream, median of --repeats
// after warm-up, no L2 flush), but every mode and variant of a shape runs in
// one process on the same cache, interleaved over --passes: `lattn bench`
// fills a new random cache per case on the host, ~25 s for a 600 MB cache,
// which made the large batches' comparisons cost most of a GPU run.
//
//   cuda_invariant_bench [--backend hopper] [--repeats 10] [--passes 2]
//       --case H:B:S ... --variant NAME[:ENV=VALUE[,ENV=VALUE...]] ...
//
// A variant named "default" runs the default mode, any other the
// batch-invariant mode, with its environment variables set while it plans
// (the decode reads LATTN_BATCH_INVARIANT_FOLD and _SPLIT_RULE at each plan).
// DeepSeek dims (L 512, R 64), bf16, pages of 64, one query token, every
// request of S keys. Prints one CSV line per (case, pass, variant): median
// and minimum µs, the ratio of the median to the same pass's "default", and
// the kernel label; then the lower of each variant's pass medians.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/common/runtime_utils.h"  // EventTimer
#include "lattn/backend.h"
#include "lattn/cache.h"
#include "lattn/config.h"
#include "lattn/metadata.h"
#include "lattn/ops.h"
#include "lattn/registry.h"
#include "lattn/step_plans.h"
#include "lattn/tensor.h"

namespace lattn {
namespace {

const Device kGpu = Device::cuda(0);

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

struct Variant {
  std::string name;
  std::vector<std::pair<std::string, std::string>> env;
  bool invariant() const { return name != "default"; }
};

Variant parse_variant(const std::string& s) {
  Variant v;
  const size_t colon = s.find(':');
  v.name = s.substr(0, colon);
  if (colon == std::string::npos) return v;
  std::string rest = s.substr(colon + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    const size_t comma = rest.find(',', pos);
    const std::string kv = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) v.env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return v;
}

// Random 16-bit values in [-1, 1) for `bytes` of device memory: 32 MB made on
// the host, repeated (the timing does not depend on the values).
void fill_random_bf16(void* dst, size_t elems, std::mt19937_64& rng) {
  const size_t chunk = std::min<size_t>(elems, size_t(16) << 20);
  OwnedTensor host = OwnedTensor::empty({int64_t(chunk)}, DType::bf16);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (size_t i = 0; i < chunk; ++i) store_from_f32(host.data(), DType::bf16, int64_t(i), dist(rng));
  char* d = static_cast<char*>(dst);
  for (size_t done = 0; done < elems; done += chunk) {
    const size_t n = std::min(chunk, elems - done);
    check(cudaMemcpy(d + done * 2, host.data(), n * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
}

struct Shape {
  int heads, batch, seq;
};

struct Inputs {
  OwnedLatentCache cache;
  OwnedTensor ql_nope, q_pe, out, lse;
  OwnedTensor qsl_h, qsl_d, seq_h, seq_d, bt_h, bt_d;
  DecodeMetadata md;
};

OwnedTensor index_host(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  OwnedTensor t = OwnedTensor::empty(shape, DType::i32);
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}
OwnedTensor to_gpu(const OwnedTensor& h) {
  OwnedTensor d = OwnedTensor::empty(h.tensor().shape(), h.tensor().dtype(), kGpu);
  copy_tensor(h, d);
  return d;
}

std::unique_ptr<Inputs> make_inputs(const Shape& s, const MlaDims& d, std::mt19937_64& rng) {
  auto in = std::make_unique<Inputs>();
  constexpr int kBlock = 64;
  const int per = (s.seq + kBlock - 1) / kBlock, num_blocks = s.batch * per + 1;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(ids.begin(), ids.begin() + int64_t(s.batch) * per);
  in->cache = OwnedLatentCache(num_blocks, kBlock, d, DType::bf16, kGpu, 1.f);
  const Tensor& data = in->cache.cache().data;
  fill_random_bf16(data.data(), size_t(data.numel()), rng);
  const int64_t t = s.batch;
  in->ql_nope = OwnedTensor::empty({t, d.num_heads, d.kv_lora_rank}, DType::bf16, kGpu);
  in->q_pe = OwnedTensor::empty({t, d.num_heads, d.qk_rope_head_dim}, DType::bf16, kGpu);
  fill_random_bf16(in->ql_nope.data(), size_t(in->ql_nope.tensor().numel()), rng);
  fill_random_bf16(in->q_pe.data(), size_t(in->q_pe.tensor().numel()), rng);
  in->out = OwnedTensor::empty({t, d.num_heads, d.kv_lora_rank}, DType::bf16, kGpu);
  in->lse = OwnedTensor::empty({d.num_heads, t}, DType::f32, kGpu);
  std::vector<int32_t> qsl(size_t(s.batch) + 1);
  for (int i = 0; i <= s.batch; ++i) qsl[size_t(i)] = i;
  in->qsl_h = index_host(qsl, {s.batch + 1});
  in->seq_h = index_host(std::vector<int32_t>(size_t(s.batch), s.seq), {s.batch});
  in->bt_h = index_host(table, {s.batch, per});
  in->qsl_d = to_gpu(in->qsl_h);
  in->seq_d = to_gpu(in->seq_h);
  in->bt_d = to_gpu(in->bt_h);
  DecodeMetadata& md = in->md;
  md.num_decodes = s.batch;
  md.num_decode_tokens = int(t);
  md.max_decode_query_len = 1;
  md.max_decode_seq_len = s.seq;
  md.block_size = kBlock;
  md.query_start_loc_cpu = in->qsl_h.tensor();
  md.query_start_loc = in->qsl_d.tensor();
  md.seq_lens_cpu = in->seq_h.tensor();
  md.seq_lens = in->seq_d.tensor();
  md.block_table_cpu = in->bt_h.tensor();
  md.block_table = in->bt_d.tensor();
  return in;
}

struct Timing {
  double median, min;
  std::string label;
};

Timing time_variant(Inputs& in, const MlaDims& d, const std::string& backend, const Variant& v, int repeats) {
  for (const auto& [k, val] : v.env) setenv(k.c_str(), val.c_str(), 1);
  DecodeBackendParams params;
  params.num_heads = d.num_heads;
  params.scale = d.softmax_scale();
  params.kv_lora_rank = d.kv_lora_rank;
  params.qk_rope_head_dim = d.qk_rope_head_dim;
  params.dtype = DType::bf16;
  params.kv_cache_dtype = DType::bf16;
  params.context.device = kGpu;
  params.context.batch_invariant = v.invariant();
  auto b = mla_decode_backend_registry().get_class(backend)->create(params);
  in.md.plans = std::make_shared<StepPlans>();  // no plan of another variant
  auto step = [&] {
    b->prepare_metadata(in.md);
    b->run(in.ql_nope, in.q_pe, in.cache.cache(), in.md, in.out, in.lse);
  };
  for (int i = 0; i < 3; ++i) step();
  check(cudaDeviceSynchronize(), "warm-up");
  // Events on the legacy default stream, which the backend uses here: they
  // bracket exactly the step's device work (the harness's timer).
  cuda::EventTimer timer;
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    timer.start(nullptr);
    step();
    timer.stop(nullptr);
    t.push_back(double(timer.elapsed_ms()) * 1e3);
  }
  Timing r;
  r.label = b->kernel_label();
  for (const auto& kv : v.env) unsetenv(kv.first.c_str());
  std::sort(t.begin(), t.end());
  r.median = t[t.size() / 2];
  r.min = t.front();
  return r;
}

int run(int argc, char** argv) {
  std::string backend = "hopper";
  int repeats = 10, passes = 2;
  std::vector<Shape> shapes;
  std::vector<Variant> variants;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) break;
    const std::string v = argv[++i];
    if (a == "--backend") {
      backend = v;
    } else if (a == "--repeats") {
      repeats = std::max(1, std::atoi(v.c_str()));
    } else if (a == "--passes") {
      passes = std::max(1, std::atoi(v.c_str()));
    } else if (a == "--case") {
      Shape s{};
      if (std::sscanf(v.c_str(), "%d:%d:%d", &s.heads, &s.batch, &s.seq) != 3) {
        std::fprintf(stderr, "--case: expected H:B:S, got %s\n", v.c_str());
        return 1;
      }
      shapes.push_back(s);
    } else if (a == "--variant") {
      variants.push_back(parse_variant(v));
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 1;
    }
  }
  if (variants.empty()) variants = {parse_variant("default"), parse_variant("invariant")};
  std::mt19937_64 rng(1234);
  std::printf("case,pass,variant,median_us,min_us,ratio_to_default,label\n");
  for (const Shape& s : shapes) {
    const MlaDims d = MlaDims::deepseek_v3(s.heads);
    auto in = make_inputs(s, d, rng);
    std::map<std::string, double> best;
    for (int pass = 0; pass < passes; ++pass) {
      double base = 0;
      for (const Variant& v : variants) {
        const Timing t = time_variant(*in, d, backend, v, repeats);
        if (v.name == "default") base = t.median;
        auto it = best.find(v.name);
        if (it == best.end() || t.median < it->second) best[v.name] = t.median;
        std::printf("H%d B%d S%d,%d,%s,%.1f,%.1f,%.3f,\"%s\"\n", s.heads, s.batch, s.seq, pass + 1, v.name.c_str(),
                    t.median, t.min, base > 0 ? t.median / base : 0.0, t.label.c_str());
        std::fflush(stdout);
      }
    }
    const double base = best.count("default") ? best["default"] : 0.0;
    for (const Variant& v : variants) {
      std::printf("SUMMARY H%d B%d S%d %s: %.1f us (lower pass median), %.3f x default\n", s.heads, s.batch, s.seq,
                  v.name.c_str(), best[v.name], base > 0 ? best[v.name] / base : 0.0);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace lattn

int main(int argc, char** argv) { return lattn::run(argc, argv); }
