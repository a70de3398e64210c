// dcp_combine over GPU buffers (lattn/dcp.h): the rescale and merge kernels
// around the communicator's collectives, on one GPU: NCCL with world size 1,
// and the in-process communicator over device buffers (world sizes 1-4, one
// thread and one stream per rank). Checked against an fp64 evaluation of the
// LSE combine on the host, with hostile partials: empty shards (-inf LSE and
// NaN outputs), rows the plan marks empty (garbage LSE, NaN outputs), head
// counts not divisible by the world size. Skips with one line without a GPU.
// NcclAcrossGpus runs NCCL over several GPUs of the machine (world size
// LATTN_NCCL_WORLD, default min(GPUs, 4); scripts/gpu-check.sh sets 2 and 4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <thread>

#include "lattn/communicator.h"
#include "lattn/dcp.h"
#include "lattn/device.h"
#include "lattn/errors.h"
#include "support/gpu.h"
#include "support/test_data.h"

namespace lattn::test {
#if defined(LATTN_TEST_KERNELS)
Stream create_stream(int device);
void destroy_stream(Stream s);
#else
inline Stream create_stream(int) { return nullptr; }
inline void destroy_stream(Stream) {}
#endif
}  // namespace lattn::test

namespace lattn {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Every rank's partial result, on the host.
struct Partials {
  int world = 1;
  int64_t T = 0, H = 0, D = 0;
  std::vector<OwnedTensor> out;             // [T, H, D] bf16 per rank
  std::vector<OwnedTensor> lse;             // [H, T] f32 per rank
  std::vector<std::vector<int32_t>> empty;  // rows each rank's plan marks empty
};

Partials make_partials(int world, int64_t T, int64_t H, int64_t D, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  Partials p{world, T, H, D, {}, {}, {}};
  for (int r = 0; r < world; ++r) {
    p.out.push_back(OwnedTensor::empty({T, H, D}, DType::bf16));
    p.lse.push_back(OwnedTensor::empty({H, T}, DType::f32));
    test::fill_uniform(p.out.back(), rng);
    auto* l = p.lse.back().data_as<float>();
    for (int64_t i = 0; i < H * T; ++i) l[i] = u(rng);
    std::vector<int32_t> empty;
    for (int64_t t = 0; t < T; ++t) {
      // Row t is empty on ranks 1.. when t % 5 == 0 (a request shorter than the world), on
      // every rank when t == 3 (output 0, LSE -inf); one (head, row) has an empty shard per rank.
      const bool marked = (t % 5 == 0 && r > 0) || t == 3;
      if (marked) {
        empty.push_back(int32_t(t));
        for (int64_t h = 0; h < H; ++h) l[h * T + t] = 50.f;  // garbage: the backend saw a placeholder slot
      }
      const int64_t h_inf = (t + r) % H;
      if (t % 3 == 1) l[h_inf * T + t] = kNegInf;
      for (int64_t h = 0; h < H; ++h) {
        if (marked || l[h * T + t] == kNegInf) test::poison(p.out.back().tensor().narrow(0, t, 1).narrow(1, h, 1));
      }
    }
    p.empty.push_back(empty);
  }
  return p;
}

// The combine in fp64: out [T, H, D] f32, lse [H, T] f32.
std::pair<OwnedTensor, OwnedTensor> expected(const Partials& p) {
  OwnedTensor out = OwnedTensor::empty({p.T, p.H, p.D}, DType::f32), lse = OwnedTensor::empty({p.H, p.T}, DType::f32);
  for (int64_t h = 0; h < p.H; ++h) {
    for (int64_t t = 0; t < p.T; ++t) {
      std::vector<double> l(size_t(p.world));
      double m = -INFINITY;
      for (int r = 0; r < p.world; ++r) {
        const auto& e = p.empty[size_t(r)];
        const bool marked = std::find(e.begin(), e.end(), int32_t(t)) != e.end();
        l[size_t(r)] = marked ? -INFINITY : double(p.lse[size_t(r)].data_as<const float>()[h * p.T + t]);
        m = std::max(m, l[size_t(r)]);
      }
      double s = 0;
      for (double v : l) s += v == -INFINITY ? 0.0 : std::exp(v - m);
      const double c = m == -INFINITY ? -INFINITY : m + std::log(s);
      lse.data_as<float>()[h * p.T + t] = float(c);
      for (int64_t d = 0; d < p.D; ++d) {
        double acc = 0;
        for (int r = 0; r < p.world; ++r) {
          if (l[size_t(r)] == -INFINITY) continue;
          acc += std::exp(l[size_t(r)] - c) *
                 double(load_as_f32(p.out[size_t(r)].data(), DType::bf16, (t * p.H + h) * p.D + d));
        }
        out.data_as<float>()[(t * p.H + h) * p.D + d] = float(acc);
      }
    }
  }
  return {std::move(out), std::move(lse)};
}

struct Case {
  int world = 1;
  bool head_slice = false;
  DcpCombineMethod method = DcpCombineMethod::all_gather_reduce_scatter;
  DType out_dtype = DType::f32;
  bool use_plan_mask = true;  // the plan's device mask (else its list, uploaded by the combine)
  bool nccl = false;          // NCCL, rank r on GPU r, instead of the in-process group over GPU 0's buffers
};

void run_case(const Case& c, int64_t T, int64_t H, int64_t D, uint64_t seed) {
  const Partials p = make_partials(c.world, T, H, D, seed);
  const auto [want_out, want_lse] = expected(p);
  std::vector<std::unique_ptr<Communicator>> comms(size_t(c.world));
  const NcclUniqueIdBytes id = c.nccl ? nccl_unique_id() : NcclUniqueIdBytes{};
  if (!c.nccl) comms = make_in_process_group(c.world, Device::cuda(0));
  const int64_t Ho = c.head_slice ? H / c.world : H;
  std::vector<OwnedTensor> got_out(size_t(c.world)), got_lse(size_t(c.world));
  std::vector<std::exception_ptr> errors(size_t(c.world));
  std::vector<std::thread> threads;
  for (int r = 0; r < c.world; ++r) {
    threads.emplace_back([&, r] {
      const Device dev = Device::cuda(c.nccl ? r : 0);
      Stream stream = test::create_stream(dev.index);
      try {
        if (c.nccl) comms[size_t(r)] = make_nccl_communicator(id, c.world, r, dev);  // joins every rank
        DcpDecodePlan plan;
        plan.empty_rows = p.empty[size_t(r)];
        if (c.use_plan_mask) {
          OwnedTensor mask = OwnedTensor::zeros({T}, DType::u8);
          for (int32_t row : plan.empty_rows) mask.data_as<uint8_t>()[row] = 1;
          plan.row_empty = test::to_device(mask, dev);
        }
        const OwnedTensor po = test::to_device(p.out[size_t(r)], dev), pl = test::to_device(p.lse[size_t(r)], dev);
        OwnedTensor out = OwnedTensor::empty({T, Ho, D}, c.out_dtype, dev),
                    lse = OwnedTensor::empty({Ho, T}, DType::f32, dev);
        test::poison(out);
        test::poison(lse);
        DcpCombineScratch scratch(dev);
        // Twice through one scratch: the second call reuses its buffers.
        for (int i = 0; i < 2; ++i) dcp_combine(*comms[size_t(r)], plan, po, pl, out, lse, c.method, stream, &scratch);
        comms[size_t(r)]->barrier(stream);
        got_out[size_t(r)] = OwnedTensor::empty({T, Ho, D}, c.out_dtype);
        got_lse[size_t(r)] = OwnedTensor::empty({Ho, T}, DType::f32);
        copy_tensor(out, got_out[size_t(r)]);
        copy_tensor(lse, got_lse[size_t(r)]);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
      test::destroy_stream(stream);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  const double tol = c.out_dtype == DType::f32 ? 1e-5 : test::rel_tolerance(c.out_dtype);
  for (int r = 0; r < c.world; ++r) {
    const int64_t h0 = c.head_slice ? r * Ho : 0;
    const OwnedTensor wo = test::to_host_f32(want_out.tensor().narrow(1, h0, Ho));
    const OwnedTensor wl = test::to_host_f32(want_lse.tensor().narrow(0, h0, Ho));
    const test::ErrorReport eo = test::compare(got_out[size_t(r)], wo), el = test::compare(got_lse[size_t(r)], wl);
    EXPECT_EQ(eo.nan_mismatches, 0) << "rank " << r << " out: " << eo.str();
    EXPECT_LE(eo.rel_l2, tol) << "rank " << r << " out: " << eo.str();
    EXPECT_EQ(el.nan_mismatches, 0) << "rank " << r << " lse: " << el.str();
    EXPECT_LE(el.rel_l2, 1e-6) << "rank " << r << " lse: " << el.str();
  }
}

TEST(DcpDeviceCombine, InProcessGroupOverDeviceBuffersWorldSizes1To4) {
  LATTN_REQUIRE_GPU();
  for (int world = 1; world <= 4; ++world) {
    for (auto method : {DcpCombineMethod::all_gather_reduce_scatter, DcpCombineMethod::all_to_all}) {
      for (bool slice : {false, true}) {
        if (slice && world == 1) continue;
        SCOPED_TRACE("world " + std::to_string(world) + (slice ? " head slice" : " every head") +
                     (method == DcpCombineMethod::all_to_all ? " all_to_all" : " ag+rs"));
        // 12 heads: divisible by every world size here (the slice form and all_to_all need it).
        run_case({.world = world, .head_slice = slice, .method = method}, 11, 12, 64, 100 + uint64_t(world));
      }
    }
  }
}

TEST(DcpDeviceCombine, Bf16OutputOddHeadsAndTheUploadedEmptyList) {
  LATTN_REQUIRE_GPU();
  run_case({.world = 3, .out_dtype = DType::bf16}, 7, 6, 512, 200);
  // 5 heads over 2 ranks: every head through the whole-partial gather.
  run_case({.world = 2, .use_plan_mask = false}, 9, 5, 32, 201);
  run_case({.world = 4, .head_slice = true, .method = DcpCombineMethod::all_to_all, .use_plan_mask = false}, 9, 8, 32,
           202);
}

TEST(DcpDeviceCombine, NcclWorldSizeOne) {
  LATTN_REQUIRE_GPU();
  if (!nccl_available()) GTEST_SKIP() << "no NCCL test: libnccl.so.2 not loadable or lattn built without NCCL";
  for (auto method : {DcpCombineMethod::all_gather_reduce_scatter, DcpCombineMethod::all_to_all}) {
    run_case({.world = 1, .method = method, .nccl = true}, 13, 16, 512, 300);
    run_case({.world = 1, .method = method, .out_dtype = DType::bf16, .nccl = true}, 13, 16, 512, 301);
  }
}

TEST(DcpDeviceCombine, NcclAcrossGpus) {
  LATTN_REQUIRE_GPU();
  if (!nccl_available()) GTEST_SKIP() << "no NCCL test: libnccl.so.2 not loadable or lattn built without NCCL";
  const int gpus = int(query_cuda_devices().devices.size());
  const char* env = std::getenv("LATTN_NCCL_WORLD");
  const int world = env ? std::atoi(env) : std::min(gpus, 4);
  if (world < 2) GTEST_SKIP() << "no multi-GPU test: " << gpus << " GPU(s)";
  if (world > gpus) GTEST_SKIP() << "LATTN_NCCL_WORLD=" << world << " but only " << gpus << " GPU(s)";
  for (auto method : {DcpCombineMethod::all_gather_reduce_scatter, DcpCombineMethod::all_to_all}) {
    for (bool slice : {false, true}) {
      SCOPED_TRACE("NCCL world " + std::to_string(world) + (slice ? " head slice" : " every head"));
      run_case({.world = world, .head_slice = slice, .method = method, .nccl = true}, 13, 16, 512, 400);
    }
  }
  run_case({.world = world, .out_dtype = DType::bf16, .nccl = true}, 5, 7, 64, 401);  // 7 heads: whole-partial gather
  std::printf("DCP combine checked over NCCL on %d GPUs\n", world);
}

TEST(DcpDeviceCombine, HostAndDeviceTensorsAreNotMixed) {
  LATTN_REQUIRE_GPU();
  auto comms = make_in_process_group(1, Device::cuda(0));
  DcpDecodePlan plan;
  OwnedTensor po = OwnedTensor::empty({2, 4, 8}, DType::f32), pl = OwnedTensor::empty({4, 2}, DType::f32);
  OwnedTensor out = OwnedTensor::empty({2, 4, 8}, DType::f32, Device::cuda(0));
  EXPECT_THROW(dcp_combine(*comms[0], plan, po, pl, out, Tensor()), ValueError);
}

}  // namespace
}  // namespace lattn
