// DCP decode scaling on GPUs (docs/dcp.md, docs/perf.md): one decode step of
// B requests at context S with the cache sharded over W ranks, one GPU and
// one thread per rank, NCCL between them. Per W: each rank's attention over
// its shard (the selector's decode backend, with LSE), the all-gather of the
// LSEs alone, and the whole dcp_combine with each method (all-gather +
// reduce-scatter, all-to-all), CUDA-event medians on rank 0 with the ranks
// aligned by a barrier before every sample.
//
// W larger than the machine's GPU count runs rank 0 alone on GPU 0
// ("one rank"): its attention over an S/W shard is the per-rank compute of
// that W; its combine kernels run with NCCL world size 1 (no link traffic),
// so that row's combine times leave the communication out.
//
//   cuda_dcp_bench [--heads 16] [--batch 64] [--seq 131072] [--worlds 1,2,4]
//                  [--block 64] [--samples 10] [--cache bf16|fp8]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cuda/common/runtime_utils.h"
#include "cuda_bench_timing.h"
#include "lattn/backend.h"
#include "lattn/cache.h"
#include "lattn/communicator.h"
#include "lattn/dcp.h"
#include "lattn/device.h"
#include "lattn/registry.h"
#include "lattn/selector.h"
#include "lattn/tensor.h"

namespace lattn {
namespace {

struct Options {
  int heads = 16, batch = 64, seq = 131072, block = 64, samples = 10;
  std::vector<int> worlds{1, 2, 4};
  DType cache = DType::bf16;
};

struct RankTimes {
  double attention = 0, all_gather_lse = 0, combine_ag_rs = 0, combine_a2a = 0;
  std::string backend;
};

// Median over samples of the device time of `issue`, each sample after `align` (a barrier).
double median_us(Stream stream, int samples, const std::function<void()>& align, const std::function<void()>& issue) {
  return bench_cuda::median_device_us(stream, 1, samples, issue, align);
}

RankTimes run_rank(const Options& o, int world, int rank, Communicator& comm, Device dev) {
  const MlaDims dims{o.heads, 512, 128, 64, 128};
  const int L = dims.kv_lora_rank, R = dims.qk_rope_head_dim, H = o.heads, B = o.batch;
  const DcpConfig dcp{world, rank, 1};
  const int64_t local = dcp_local_count(dcp, o.seq);
  const int64_t blocks_per_req = (local + o.block - 1) / o.block;
  OwnedLatentCache cache(blocks_per_req * B, o.block, dims, o.cache, dev, o.cache == DType::fp8_e4m3 ? 0.05f : 1.f);
  cuda::fill_random_device(cache.cache().data.data(), o.cache, cache.cache().data.numel(), 7 + uint64_t(rank), 1.f,
                           nullptr);
  std::vector<RequestSpec> reqs;
  for (int b = 0; b < B; ++b) {
    RequestSpec r{.query_len = 1, .num_computed_tokens = o.seq - 1, .block_table = {}};
    for (int64_t i = 0; i < blocks_per_req; ++i) r.block_table.push_back(int32_t(b * blocks_per_req + i));
    reqs.push_back(std::move(r));
  }
  MetadataBuilderConfig bc;
  bc.block_size = o.block;
  bc.chunked_prefill_enabled = false;
  const MlaMetadataBuilder builder(bc);
  const DcpDecodePlan plan = build_dcp_decode_metadata(builder, reqs, dcp, dev);

  cuda::device_synchronize(dev.index);
  Stream stream = nullptr;
  const SelectorConfig sc = SelectorConfig::for_dims(dims, DType::bf16, o.cache, dev, o.block, 1);
  auto cls = get_mla_decode_backend(sc);
  DecodeBackendParams p{H, dims.softmax_scale(), L, R, DType::bf16, o.cache, RunContext{dev, stream, 0, false}};
  auto backend = cls->create(p);
  OwnedTensor ql = OwnedTensor::empty({B, H, L}, DType::bf16, dev),
              qpe = OwnedTensor::empty({B, H, R}, DType::bf16, dev);
  cuda::fill_random_device(ql.data(), DType::bf16, ql.tensor().numel(), 11, 1.f, stream);
  cuda::fill_random_device(qpe.data(), DType::bf16, qpe.tensor().numel(), 12, 1.f, stream);
  OwnedTensor part = OwnedTensor::empty({B, H, L}, DType::bf16, dev), lse = OwnedTensor::empty({H, B}, DType::f32, dev);
  OwnedTensor out = OwnedTensor::empty({B, H, L}, DType::bf16, dev);
  OwnedTensor slice = OwnedTensor::empty({B, H % world == 0 ? H / world : H, L}, DType::bf16, dev);
  OwnedTensor lse_all = OwnedTensor::empty({comm.world_size(), H, B}, DType::f32, dev);
  DcpCombineScratch scratch(dev);
  const DecodeMetadata& md = *plan.metadata.decode_metadata();
  backend->prepare_metadata(md);

  RankTimes t;
  t.backend = backend->name();
  auto align = [&] { comm.barrier(stream); };
  t.attention = median_us(stream, o.samples, align, [&] { backend->run(ql, qpe, cache, md, part, lse); });
  t.all_gather_lse = median_us(stream, o.samples, align, [&] { comm.all_gather(lse, lse_all, stream); });
  // Every rank keeps its own heads (vLLM's layout): the reduce-scatter / all-to-all output.
  const Tensor target = comm.world_size() > 1 && H % comm.world_size() == 0 ? slice.tensor() : out.tensor();
  t.combine_ag_rs = median_us(stream, o.samples, align, [&] {
    dcp_combine(comm, plan, part, lse, target, Tensor(), DcpCombineMethod::all_gather_reduce_scatter, stream, &scratch);
  });
  t.combine_a2a = median_us(stream, o.samples, align, [&] {
    dcp_combine(comm, plan, part, lse, target, Tensor(), DcpCombineMethod::all_to_all, stream, &scratch);
  });
  cuda::device_synchronize(dev.index);
  return t;
}

// The same-run ceiling: device-to-device copy of 2 GiB on GPU 0 (GB/s, read + write).
double copy_ceiling_gbps() { return bench_cuda::measure_copy_ceiling(nullptr, Device::cuda(0), 5).rate; }

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::atoi(item.c_str()));
  return v;
}

int main_impl(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    // scripts/gpu-check.sh passes Google Benchmark's output flags to every CUDA bench: not ours.
    if (a.rfind("--benchmark", 0) == 0) {
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "cuda_dcp_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--heads")
      o.heads = std::atoi(argv[i + 1]);
    else if (a == "--batch")
      o.batch = std::atoi(argv[i + 1]);
    else if (a == "--seq")
      o.seq = std::atoi(argv[i + 1]);
    else if (a == "--block")
      o.block = std::atoi(argv[i + 1]);
    else if (a == "--samples")
      o.samples = std::atoi(argv[i + 1]);
    else if (a == "--worlds")
      o.worlds = parse_list(argv[i + 1]);
    else if (a == "--cache")
      o.cache = std::string(argv[i + 1]) == "fp8" ? DType::fp8_e4m3 : DType::bf16;
    else {
      std::fprintf(stderr, "cuda_dcp_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const int gpus = int(query_cuda_devices().devices.size());
  if (gpus == 0) {
    std::printf("cuda_dcp_bench: no CUDA device, nothing measured\n");
    return 0;
  }
  if (!nccl_available()) {
    std::printf("cuda_dcp_bench: NCCL not available, nothing measured\n");
    return 0;
  }
  std::printf("DCP decode: H%d B%d S%d bf16 activations, %s cache, block %d; %d GPU(s); median of %d samples (us)\n",
              o.heads, o.batch, o.seq, o.cache == DType::fp8_e4m3 ? "fp8" : "bf16", o.block, gpus, o.samples);
  const double ceiling = copy_ceiling_gbps();
  const double cache_bytes = double(o.batch) * o.seq * (512 + 64) * (o.cache == DType::fp8_e4m3 ? 1 : 2);
  std::printf("same-run ceiling: device copy %.0f GB/s (read + write); W=1 attention reads %.2f GB of cache\n", ceiling,
              cache_bytes / 1e9);
  std::printf("%-3s %-9s %-8s %10s %10s %10s %10s %10s %9s %9s\n", "W", "mode", "backend", "attention", "ag_lse",
              "comb_agrs", "comb_a2a", "total", "speedup", "attn_GB/s");
  double base_total = 0;
  for (int world : o.worlds) {
    const bool real = world <= gpus;
    const int ranks = real ? world : 1;
    const NcclUniqueIdBytes id = nccl_unique_id();
    std::vector<RankTimes> times(static_cast<size_t>(ranks));
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        try {
          const Device dev = Device::cuda(r);
          auto comm = make_nccl_communicator(id, ranks, r, dev);
          times[size_t(r)] = run_rank(o, world, r, *comm, dev);
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    bool failed = false;
    for (int r = 0; r < ranks; ++r)
      if (!errors[size_t(r)].empty()) {
        std::printf("W=%d rank %d failed: %s\n", world, r, errors[size_t(r)].c_str());
        failed = true;
      }
    if (failed) continue;
    // The slowest rank bounds the step.
    RankTimes m = times[0];
    for (const RankTimes& t : times) {
      m.attention = std::max(m.attention, t.attention);
      m.all_gather_lse = std::max(m.all_gather_lse, t.all_gather_lse);
      m.combine_ag_rs = std::max(m.combine_ag_rs, t.combine_ag_rs);
      m.combine_a2a = std::max(m.combine_a2a, t.combine_a2a);
    }
    const double total = m.attention + std::min(m.combine_ag_rs, m.combine_a2a);
    if (world == 1) base_total = m.attention;  // one GPU needs no combine
    const double speedup = base_total > 0 ? base_total / (world == 1 ? m.attention : total) : 0;
    const double gbps = cache_bytes / world / (m.attention * 1e3);
    std::printf("%-3d %-9s %-8s %10.1f %10.1f %10.1f %10.1f %10.1f %8.2fx %9.0f\n", world, real ? "nccl" : "one-rank",
                m.backend.c_str(), m.attention, m.all_gather_lse, m.combine_ag_rs, m.combine_a2a,
                world == 1 ? m.attention : total, speedup, gbps);
  }
  std::printf("speedup = W=1 attention / (attention + faster combine); linear = W. one-rank rows: no link traffic.\n");
  return 0;
}

}  // namespace
}  // namespace lattn

int main(int argc, char** argv) {
  try {
    return lattn::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_dcp_bench: %s\n", e.what());
    return 1;
  }
}
