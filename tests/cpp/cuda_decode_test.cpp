// The `cuda` and `hopper` decode backends against a float64 loop written here, on hostile
// data (NaN-poisoned unused pages and partial-block tails, permuted block
// tables, garbage block ids past each sequence, strided queries, outputs
// poisoned before every run), across heads 1..128, query tokens 1..4 per
// request (causal), block sizes 1/16/64, bf16/f16 activations, 16-bit and
// fp8 caches, DeepSeek and other latent dims; plus split-KV scheduling on
// unbalanced batches and CUDA-graph capture/replay of the decode step.
// `hopper` runs every case too where the GPU is sm90 (its wgmma kernel on the
// 16-bit cases with pages of 64/128/256 keys and more than 16 rows per
// request, the cuda kernels it delegates to on the rest).
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/ops/device_ops.h"
#include "core/ops/gemm.h"
#include "cuda/common/runtime_utils.h"
#include "cuda/cuda_decode_backend.h"
#include "cuda/sm90/decode/decode_schedule.h"
#include "lattn/backend.h"
#include "lattn/cache.h"
#include "lattn/device.h"
#include "lattn/errors.h"
#include "lattn/registry.h"
#include "support/gpu.h"
#include "support/scoped_env.h"
#include "support/test_data.h"

namespace lattn {
namespace {

const Device kGpu = Device::cuda(0);

struct DecodeCase {
  const char* name;
  int heads, L, R, block_size;
  DType dtype, cache_dtype;
  std::vector<int> seq_lens;  // keys per request (context + new)
  std::vector<int> s_q;       // query tokens per request
  bool strided_q = false;     // ql_nope as the [T, H, L] view of an [H, T, L] buffer
  bool misaligned_q = false;  // q_pe rows not 16-byte aligned (the kernel's scalar Q path)
};

// A decode batch on host and device: the paged cache (NaN everywhere except the
// entries of real keys), block tables, metadata, queries. Pointer-stable: the
// graph tests rewrite values in place.
struct DecodeBatch {
  int B = 0, T = 0, H = 0, L = 0, R = 0, bs = 0, max_blocks = 0, num_blocks = 0, max_s_q = 1;
  DType dtype{}, cache_dtype{};
  float cache_scale = 1.f, softmax_scale = 0.f;
  std::vector<int> seq_lens, s_q, q_start;
  std::vector<int32_t> table;                   // [B, max_blocks]
  OwnedTensor cache_host;                       // [num_blocks, bs, L + R]
  OwnedTensor q_nope_host, q_pe_host;           // [T, H, L], [T, H, R]
  OwnedTensor cache_dev, q_pe_buf, q_nope_buf;  // q_nope_buf: [T, H, L] or [H, T, L]; q_pe_buf [T, H, R(+4)]
  Tensor q_nope_dev, q_pe_dev;                  // [T, H, L] and [T, H, R] views
  OwnedTensor seq_lens_host, qsl_host, table_host, seq_lens_dev, qsl_dev, table_dev;
  DecodeMetadata md;
  bool strided_q = false, misaligned_q = false;

  LatentCache cache() const { return LatentCache{cache_dev.tensor(), L, R, cache_scale}; }
};

// Fills `b` for the case's shape with fresh random values (keeps every buffer
// if they exist and are large enough: the graph tests rely on that).
void randomize(DecodeBatch& b, const std::vector<int>& seq_lens, const std::vector<int>& s_q, std::mt19937_64& rng) {
  b.B = int(seq_lens.size());
  b.seq_lens = seq_lens;
  b.s_q = s_q;
  b.q_start.assign(size_t(b.B) + 1, 0);
  for (int r = 0; r < b.B; ++r) b.q_start[size_t(r) + 1] = b.q_start[size_t(r)] + s_q[size_t(r)];
  const int T = b.q_start[size_t(b.B)];
  const int D = b.L + b.R;
  // Blocks: a random permutation of all of them, so requests own scattered pages.
  std::vector<int32_t> perm(size_t(b.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  b.table.assign(size_t(b.B) * b.max_blocks, 0);
  size_t next = 0;
  for (int r = 0; r < b.B; ++r) {
    const int used = (seq_lens[size_t(r)] + b.bs - 1) / b.bs;
    for (int i = 0; i < b.max_blocks; ++i) {
      // Past the sequence: ids far outside the cache (must never be read).
      b.table[size_t(r) * b.max_blocks + i] = i < used ? perm.at(next++) : 0x3fffffff - i;
    }
  }
  // The cache: NaN bytes everywhere (unused pages, tails of partial blocks),
  // then real values for every key of every request.
  std::memset(b.cache_host.data(), 0xff, b.cache_host.tensor().nbytes());
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int r = 0; r < b.B; ++r) {
    for (int key = 0; key < seq_lens[size_t(r)]; ++key) {
      const int64_t block = b.table[size_t(r) * b.max_blocks + key / b.bs];
      const int64_t base = (block * b.bs + key % b.bs) * D;
      for (int d = 0; d < D; ++d)
        store_from_f32(b.cache_host.data(), b.cache_dtype, base + d, normal(rng) / b.cache_scale);
    }
  }
  test::fill_normal(b.q_nope_host.tensor().narrow(0, 0, T), rng);
  test::fill_normal(b.q_pe_host.tensor().narrow(0, 0, T), rng);

  copy_tensor(b.cache_host.tensor(), b.cache_dev.tensor());
  if (b.misaligned_q) {
    OwnedTensor t = OwnedTensor::empty(b.q_pe_buf.tensor().shape(), b.dtype);
    std::memset(t.data(), 0, t.tensor().nbytes());
    copy_host(b.q_pe_host.tensor(), t.tensor().narrow(2, 4, b.R));
    copy_tensor(t.tensor(), b.q_pe_buf.tensor());
  } else {
    copy_tensor(b.q_pe_host.tensor(), b.q_pe_buf.tensor());
  }
  if (b.strided_q) {
    // [T, H, L] host -> [H, T, L] device buffer, through a host transpose.
    OwnedTensor t = OwnedTensor::empty(b.q_nope_buf.tensor().shape(), b.dtype);
    copy_host(b.q_nope_host.tensor(), t.tensor().transpose(0, 1));
    copy_tensor(t.tensor(), b.q_nope_buf.tensor());
  } else {
    copy_tensor(b.q_nope_host.tensor(), b.q_nope_buf.tensor());
  }
  std::vector<int32_t> lens(seq_lens.begin(), seq_lens.end()), qsl(b.q_start.begin(), b.q_start.end());
  std::memcpy(b.seq_lens_host.data(), lens.data(), lens.size() * 4);
  std::memcpy(b.qsl_host.data(), qsl.data(), qsl.size() * 4);
  std::memcpy(b.table_host.data(), b.table.data(), b.table.size() * 4);
  copy_tensor(b.seq_lens_host.tensor(), b.seq_lens_dev.tensor());
  copy_tensor(b.qsl_host.tensor(), b.qsl_dev.tensor());
  copy_tensor(b.table_host.tensor(), b.table_dev.tensor());
  b.md.num_decodes = b.B;
  b.md.num_decode_tokens = T;
  b.md.max_decode_query_len = b.max_s_q;
  b.md.max_decode_seq_len = *std::max_element(seq_lens.begin(), seq_lens.end());
  b.md.block_size = b.bs;
}

std::unique_ptr<DecodeBatch> make_batch(const DecodeCase& c, std::mt19937_64& rng, int capacity_blocks = 0) {
  auto b = std::make_unique<DecodeBatch>();
  b->H = c.heads, b->L = c.L, b->R = c.R, b->bs = c.block_size, b->dtype = c.dtype, b->cache_dtype = c.cache_dtype;
  b->strided_q = c.strided_q;
  b->cache_scale = c.cache_dtype == DType::fp8_e4m3 ? 0.05f : 1.f;  // stored values ~N(0, 20^2): uses fp8's range
  b->softmax_scale = 1.f / std::sqrt(192.f);
  b->max_s_q = *std::max_element(c.s_q.begin(), c.s_q.end());
  int max_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  b->max_blocks = std::max((max_len + c.block_size - 1) / c.block_size, capacity_blocks) + 2;
  int used = 0;
  for (int s : c.seq_lens) used += (s + c.block_size - 1) / c.block_size;
  b->num_blocks = std::max(used, int(c.seq_lens.size()) * std::max(capacity_blocks, 1)) + 7;  // + unused pages
  const int B = int(c.seq_lens.size());
  const int T = std::accumulate(c.s_q.begin(), c.s_q.end(), 0);
  b->T = T;
  const int D = c.L + c.R;
  b->cache_host = OwnedTensor::empty({b->num_blocks, c.block_size, D}, c.cache_dtype);
  b->cache_dev = OwnedTensor::empty({b->num_blocks, c.block_size, D}, c.cache_dtype, kGpu);
  b->q_nope_host = OwnedTensor::empty({T, c.heads, c.L}, c.dtype);
  b->q_pe_host = OwnedTensor::empty({T, c.heads, c.R}, c.dtype);
  b->misaligned_q = c.misaligned_q;
  b->q_pe_buf = OwnedTensor::empty({T, c.heads, c.R + (c.misaligned_q ? 4 : 0)}, c.dtype, kGpu);
  b->q_pe_dev = c.misaligned_q ? b->q_pe_buf.tensor().narrow(2, 4, c.R) : b->q_pe_buf.tensor();
  if (c.strided_q) {
    b->q_nope_buf = OwnedTensor::empty({c.heads, T, c.L}, c.dtype, kGpu);
    b->q_nope_dev = b->q_nope_buf.tensor().transpose(0, 1);
  } else {
    b->q_nope_buf = OwnedTensor::empty({T, c.heads, c.L}, c.dtype, kGpu);
    b->q_nope_dev = b->q_nope_buf.tensor();
  }
  b->seq_lens_host = OwnedTensor::empty({B}, DType::i32);
  b->qsl_host = OwnedTensor::empty({B + 1}, DType::i32);
  b->table_host = OwnedTensor::empty({B, b->max_blocks}, DType::i32);
  b->seq_lens_dev = OwnedTensor::empty({B}, DType::i32, kGpu);
  b->qsl_dev = OwnedTensor::empty({B + 1}, DType::i32, kGpu);
  b->table_dev = OwnedTensor::empty({B, b->max_blocks}, DType::i32, kGpu);
  b->md.seq_lens_cpu = b->seq_lens_host.tensor();
  b->md.seq_lens = b->seq_lens_dev.tensor();
  b->md.query_start_loc_cpu = b->qsl_host.tensor();
  b->md.query_start_loc = b->qsl_dev.tensor();
  b->md.block_table_cpu = b->table_host.tensor();
  b->md.block_table = b->table_dev.tensor();
  randomize(*b, c.seq_lens, c.s_q, rng);
  return b;
}

// float64 reference of absorbed decode attention: out [T, H, L], lse [H, T].
void reference_decode(const DecodeBatch& b, OwnedTensor& out, OwnedTensor& lse) {
  const int D = b.L + b.R;
  out = OwnedTensor::empty({b.T, b.H, b.L}, DType::f32);
  lse = OwnedTensor::empty({b.H, b.T}, DType::f32);
  const float k_scale = b.cache_dtype == DType::fp8_e4m3 ? b.cache_scale : 1.f;
  const int rows = b.T * b.H;
#pragma omp parallel for schedule(dynamic)
  for (int row = 0; row < rows; ++row) {
    const int t = row / b.H, h = row % b.H;
    const int r = int(std::upper_bound(b.q_start.begin(), b.q_start.end(), t) - b.q_start.begin()) - 1;
    const int j = t - b.q_start[size_t(r)];
    const int S = b.seq_lens[size_t(r)];
    const int limit = S - b.s_q[size_t(r)] + j + 1;
    std::vector<double> q(static_cast<size_t>(D)), s(static_cast<size_t>(std::max(limit, 0)));
    std::vector<double> o(static_cast<size_t>(b.L), 0.0);
    for (int d = 0; d < D; ++d) {
      q[size_t(d)] = d < b.L ? load_as_f32(b.q_nope_host.data(), b.dtype, (int64_t(t) * b.H + h) * b.L + d)
                             : load_as_f32(b.q_pe_host.data(), b.dtype, (int64_t(t) * b.H + h) * b.R + d - b.L);
    }
    auto entry = [&](int key) {
      const int64_t block = b.table[size_t(r) * b.max_blocks + key / b.bs];
      return (block * b.bs + key % b.bs) * D;
    };
    double m = -std::numeric_limits<double>::infinity();
    for (int key = 0; key < limit; ++key) {
      const int64_t e = entry(key);
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += q[size_t(d)] * double(load_as_f32(b.cache_host.data(), b.cache_dtype, e + d));
      s[size_t(key)] = dot * k_scale * b.softmax_scale;
      m = std::max(m, s[size_t(key)]);
    }
    double sum = 0;
    for (int key = 0; key < limit; ++key) {
      const double p = std::exp(s[size_t(key)] - m);
      sum += p;
      const int64_t e = entry(key);
      for (int d = 0; d < b.L; ++d) o[size_t(d)] += p * double(load_as_f32(b.cache_host.data(), b.cache_dtype, e + d));
    }
    for (int d = 0; d < b.L; ++d) {
      out.data_as<float>()[int64_t(row) * b.L + d] = limit > 0 ? float(o[size_t(d)] / sum * k_scale) : 0.f;
    }
    lse.data_as<float>()[int64_t(h) * b.T + t] =
        limit > 0 ? float(m + std::log(sum)) : -std::numeric_limits<float>::infinity();
  }
}

// The backend through the registry, as MlaAttention creates it (no CUDA
// symbol is named here, so the test also links in builds without CUDA).
std::unique_ptr<DecodeBackend> make_backend(const DecodeBatch& b, Stream stream = nullptr,
                                            const std::string& backend = "cuda") {
  DecodeBackendParams params;
  params.num_heads = b.H;
  params.scale = b.softmax_scale;
  params.kv_lora_rank = b.L;
  params.qk_rope_head_dim = b.R;
  params.dtype = b.dtype;
  params.kv_cache_dtype = b.cache_dtype;
  params.context = RunContext{kGpu, stream, 0};
  return mla_decode_backend_registry().get_class(backend)->create(params);
}

// Empty when `backend` can run on this GPU (cuda: sm80+; hopper: sm90 with
// sm_90a code built), else why not.
std::string backend_unusable(const std::string& backend) {
  const auto cls = mla_decode_backend_registry().get_class(backend);
  if (!cls->is_available()) return backend + " is not available in this build";
  if (!cls->supports_compute_capability(device_capability(0))) return backend + " does not run on this GPU";
  return {};
}

// The backends this binary checks on this GPU.
std::vector<std::string> backends_here() {
  std::vector<std::string> v;
  for (const char* name : {"cuda", "hopper"}) {
    if (backend_unusable(name).empty()) v.push_back(name);
  }
  return v;
}

using test::ScopedEnv;  // the decode switches are read at each plan

// hopper's key-major kernel for a 16-bit cache and at most 16 rows (sm90/decode/km16_*).
constexpr const char* kKm16Label = "sm90a wgmma + TMA decode (16-bit cache, key-major)";

// The label of a plan that runs the one-launch small-batch kernel (plan,
// attention and combine in one cooperative kernel: smxx/decode_fused.h).
bool runs_fused(const DecodeBackend& backend) {
  return backend.kernel_label().find("planned and combined in the same launch") != std::string::npos;
}

// Poisons out/lse, runs, and checks them against the float64 reference.
void run_and_check(DecodeBackend& backend, DecodeBatch& b, const OwnedTensor& out, const OwnedTensor& lse,
                   const char* what, bool prepare = true, const cuda::CapturedGraph* graph = nullptr,
                   Stream stream = nullptr) {
  test::poison(out.tensor());
  test::poison(lse.tensor());
  if (graph) {
    graph->replay(stream);
  } else {
    if (prepare) backend.prepare_metadata(b.md);
    backend.run(b.q_nope_dev, b.q_pe_dev, b.cache(), b.md, out.tensor(), lse.tensor());
  }
  detail::cuda_device_ops().synchronize(stream);
  OwnedTensor want_out, want_lse;
  reference_decode(b, want_out, want_lse);
  const test::ErrorReport e = test::compare(out.tensor(), want_out.tensor());
  EXPECT_EQ(e.nan_mismatches, 0) << what << ": unwritten or NaN outputs: " << e.str();
  EXPECT_LE(e.rel_l2, test::rel_tolerance(b.dtype)) << what << ": " << e.str();
  const test::ErrorReport el = test::compare(lse.tensor(), want_lse.tensor());
  EXPECT_EQ(el.nan_mismatches, 0) << what << ": LSE " << el.str();
  // LSE is computed from f32 scores of the same rounded inputs: absolute error ~1e-5.
  EXPECT_LE(el.max_abs, 2e-3) << what << ": LSE " << el.str();
}

class CudaDecode : public ::testing::TestWithParam<std::tuple<const char*, DecodeCase>> {};

TEST_P(CudaDecode, MatchesFloat64Reference) {
  LATTN_REQUIRE_GPU();
  const std::string name = std::get<0>(GetParam());
  const DecodeCase& c = std::get<1>(GetParam());
  const std::string why = backend_unusable(name);
  if (!why.empty()) GTEST_SKIP() << why;
  std::mt19937_64 rng(1234);
  auto b = make_batch(c, rng);
  auto backend = make_backend(*b, nullptr, name);
  OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
  OwnedTensor lse = OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu);
  run_and_check(*backend, *b, out, lse, c.name);
  // Which kernel ran: hopper's wgmma kernel exactly where it serves the case
  // (16-bit cache of the activation dtype, DeepSeek dims, pages of a multiple
  // of 64 keys, more than 16 rows per request), else the cuda kernels.
  const std::string label = backend->kernel_label();
  const int max_s_q = *std::max_element(c.s_q.begin(), c.s_q.end());
  const bool wgmma = name == "hopper" && c.cache_dtype == c.dtype && c.L == 512 && c.R == 64 &&
                     c.block_size % 64 == 0 && c.heads * max_s_q > 16;
  const bool generic = c.L != 512 || c.R != 64 || (c.cache_dtype != c.dtype && c.cache_dtype != DType::fp8_e4m3);
  // hopper's key-major fp8 kernel: an fp8 cache, DeepSeek dims, pages of a multiple of 64 keys, at most 16 rows.
  const bool fp8_wgmma = name == "hopper" && c.cache_dtype == DType::fp8_e4m3 && c.L == 512 && c.R == 64 &&
                         c.block_size % 64 == 0 && c.heads * max_s_q <= 16 &&
                         std::getenv("LATTN_HOPPER_FP8") == nullptr;
  // hopper's key-major 16-bit kernel: the wgmma kernel's layouts with at most
  // 16 rows; by default for batches the one-launch kernel does not take (more
  // than 8 requests, or none with LATTN_DECODE_FUSED=0) with at most 32 key
  // tiles per SM (every case here has far fewer), LATTN_HOPPER_KM16=1: all.
  // (A batch of one with 6 or more tiles per SM on an H200 takes it too:
  // none here, CudaDecodeSmall.LongBatchOfOneTakesItsDevicesPath.)
  const bool km16_layout = name == "hopper" && c.cache_dtype == c.dtype && c.L == 512 && c.R == 64 &&
                           c.block_size % 64 == 0 && c.heads * max_s_q <= 16;
  const char* km16_env = std::getenv("LATTN_HOPPER_KM16");
  const char* fused_env = std::getenv("LATTN_DECODE_FUSED");
  const bool km16 = km16_layout && (km16_env ? std::atoi(km16_env) != 0
                                             : c.seq_lens.size() > 8 || (fused_env && std::atoi(fused_env) == 0));
  const std::string expected = name + ": " +
                               (wgmma ? std::string("sm90a wgmma + TMA decode (") +
                                            (cuda::sm90::decode_sm90_seesaw(false) ? "seesaw" : "serial") + " schedule)"
                                : fp8_wgmma ? std::string("sm90a wgmma + TMA decode (fp8 cache, key-major)")
                                : km16      ? std::string(kKm16Label)
                                : generic   ? std::string("generic SIMT decode kernel")
                                            : std::string("sm80 mma.sync decode"));
  EXPECT_EQ(label.rfind(expected, 0), 0u) << c.name << " on " << name << " ran " << label;
  // The one-launch kernel: sm90, 16-row tiles (at most 16 rows), a cache of
  // the activation dtype, at most 8 requests (the default limit), its own
  // tile configuration (a forced LATTN_DECODE_TILES may pick another).
  const bool fused = !wgmma && !km16 && !generic && c.cache_dtype == c.dtype && c.heads * max_s_q <= 16 &&
                     c.seq_lens.size() <= 8 && device_capability(0)->major == 9 &&
                     std::getenv("LATTN_DECODE_FUSED") == nullptr && std::getenv("LATTN_DECODE_TILES") == nullptr &&
                     std::getenv("LATTN_DECODE_FUSED_MAX_BATCH") == nullptr;
  if (fused) {
    EXPECT_TRUE(runs_fused(*backend)) << c.name << " on " << name << " ran " << label;
  }
  // Fresh values in the same shape, second plan on the same instance.
  randomize(*b, c.seq_lens, c.s_q, rng);
  run_and_check(*backend, *b, out, lse, c.name);
  if (runs_fused(*backend)) {
    // The same case through the planning, attention and combine kernels.
    ScopedEnv off("LATTN_DECODE_FUSED", "0");
    randomize(*b, c.seq_lens, c.s_q, rng);
    run_and_check(*backend, *b, out, lse, c.name);
    EXPECT_FALSE(runs_fused(*backend)) << backend->kernel_label();
  }
  if (!runs_fused(*backend)) {
    // Both paths of the combine kernel (decode_combine.cu: one warp per row,
    // or one CTA per row chunk, the default for steps of at most 128 rows).
    for (const char* path : {"0", "1"}) {
      ScopedEnv combine("LATTN_DECODE_COMBINE", path);
      randomize(*b, c.seq_lens, c.s_q, rng);
      const std::string what = std::string(c.name) + " with LATTN_DECODE_COMBINE=" + path;
      run_and_check(*backend, *b, out, lse, what.c_str());
    }
  }
  if (km16_layout && !km16 && device_capability(0)->major == 9) {
    // The same case on the key-major 16-bit kernel.
    ScopedEnv on("LATTN_HOPPER_KM16", "1");
    randomize(*b, c.seq_lens, c.s_q, rng);
    run_and_check(*backend, *b, out, lse, c.name);
    EXPECT_EQ(backend->kernel_label().rfind(std::string("hopper: ") + kKm16Label, 0), 0u) << backend->kernel_label();
  }
}

std::vector<int> lens(std::initializer_list<int> v) { return v; }
std::vector<int> ones(size_t n, int v = 1) { return std::vector<int>(n, v); }
std::vector<int> random_lens(size_t n, int lo, int hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int> v(n);
  for (int& x : v) x = d(rng);
  return v;
}

const DecodeCase kCases[] = {
    {"h16_sq1_page64_bf16", 16, 512, 64, 64, DType::bf16, DType::bf16, random_lens(9, 1, 2100, 1), ones(9)},
    {"h128_sq1_page64_bf16_unbalanced", 128, 512, 64, 64, DType::bf16, DType::bf16, lens({4100, 3, 700, 64, 65}),
     ones(5), true},
    {"h1_sq1_page16_bf16", 1, 512, 64, 16, DType::bf16, DType::bf16, random_lens(6, 1, 900, 2), ones(6)},
    {"h3_sq2_page1_f16", 3, 512, 64, 1, DType::f16, DType::f16, random_lens(5, 2, 300, 3), ones(5, 2)},
    {"h16_sq4_page16_bf16_fp8", 16, 512, 64, 16, DType::bf16, DType::fp8_e4m3, random_lens(6, 4, 1500, 4),
     lens({4, 1, 3, 4, 2, 4}), true},
    {"h128_sq2_page64_bf16_fp8", 128, 512, 64, 64, DType::bf16, DType::fp8_e4m3, lens({1030, 2, 129}), ones(3, 2)},
    {"h16_sq3_page64_f16_fp8", 16, 512, 64, 64, DType::f16, DType::fp8_e4m3, random_lens(4, 3, 800, 5), ones(4, 3)},
    {"h64_sq1_page32_f16_misaligned_q", 64, 512, 64, 32, DType::f16, DType::f16, random_lens(5, 1, 600, 6), ones(5),
     false, true},
    {"h16_seq_eq_sq_empty_context", 16, 512, 64, 64, DType::bf16, DType::bf16, lens({1, 2, 4, 3}), lens({1, 2, 4, 3})},
    {"h16_b1_long_split", 16, 512, 64, 64, DType::bf16, DType::bf16, lens({20000}), ones(1)},
    {"generic_l256_r32_h8_sq2_page16", 8, 256, 32, 16, DType::bf16, DType::bf16, random_lens(4, 2, 500, 7), ones(4, 2)},
    {"generic_l128_r64_h3_page1_fp8", 3, 128, 64, 1, DType::f16, DType::fp8_e4m3, random_lens(3, 1, 200, 8), ones(3)},
    {"generic_bf16_acts_f16_cache", 16, 512, 64, 64, DType::bf16, DType::f16, random_lens(3, 1, 300, 9), ones(3)},
    // Shapes of the hopper wgmma kernel (16-bit, pages of 64/128/256 keys,
    // more than 16 rows per request; with fewer, hopper runs the cuda kernel):
    {"h32_sq1_page128_bf16", 32, 512, 64, 128, DType::bf16, DType::bf16, random_lens(7, 1, 3000, 12), ones(7)},
    {"h5_sq4_page64_f16", 5, 512, 64, 64, DType::f16, DType::f16, random_lens(5, 4, 900, 13), lens({4, 1, 3, 4, 2})},
    {"h128_sq2_page64_bf16", 128, 512, 64, 64, DType::bf16, DType::bf16, lens({1030, 2, 129, 64}), ones(4, 2)},
    {"h64_sq1_page64_f16_misaligned_q", 64, 512, 64, 64, DType::f16, DType::f16, random_lens(5, 1, 700, 14), ones(5),
     false, true},
    {"h17_sq1_page64_bf16_strided", 17, 512, 64, 64, DType::bf16, DType::bf16, random_lens(6, 1, 1300, 15), ones(6),
     true},
    {"h32_sq2_page256_bf16", 32, 512, 64, 256, DType::bf16, DType::bf16, random_lens(4, 2, 2000, 16), ones(4, 2)},
    {"h32_b1_long_split", 32, 512, 64, 64, DType::bf16, DType::bf16, lens({20000}), ones(1)},
    // Shapes of hopper's key-major fp8 kernel (fp8 cache, pages of 64/128/256
    // keys; 16 rows per tile, so H16 with one token fills a tile and H3 x 4
    // tokens leaves 4 rows of it empty; causal s_q > 1; a long split request):
    {"h16_sq1_page64_bf16_fp8", 16, 512, 64, 64, DType::bf16, DType::fp8_e4m3, random_lens(9, 1, 3000, 17), ones(9)},
    {"h8_sq2_page128_f16_fp8_strided", 8, 512, 64, 128, DType::f16, DType::fp8_e4m3, random_lens(5, 2, 1500, 18),
     ones(5, 2), true},
    {"h3_sq4_page64_bf16_fp8_misaligned_q", 3, 512, 64, 64, DType::bf16, DType::fp8_e4m3, random_lens(4, 4, 700, 19),
     lens({4, 1, 3, 2}), false, true},
    {"h16_seq_eq_sq_page256_bf16_fp8", 16, 512, 64, 256, DType::bf16, DType::fp8_e4m3, lens({1, 2, 65, 3}),
     lens({1, 2, 1, 3})},
    {"h16_b1_long_split_bf16_fp8", 16, 512, 64, 64, DType::bf16, DType::fp8_e4m3, lens({20000}), ones(1)},
    // Shapes of hopper's key-major 16-bit kernel (at most 16 rows, pages of
    // 64/128/256; more than 8 requests, so it runs by default; causal s_q > 1
    // with tails and keys some rows may not see; strided and unaligned Q):
    {"h8_sq2_page128_f16_strided_b10", 8, 512, 64, 128, DType::f16, DType::f16, random_lens(10, 2, 1500, 22),
     ones(10, 2), true},
    {"h3_sq4_page64_bf16_misaligned_q_b12", 3, 512, 64, 64, DType::bf16, DType::bf16, random_lens(12, 4, 700, 23),
     lens({4, 1, 3, 2, 4, 4, 1, 2, 3, 4, 1, 4}), false, true},
    {"h16_short_page256_bf16_b9", 16, 512, 64, 256, DType::bf16, DType::bf16, lens({1, 2, 65, 3, 640, 64, 129, 7, 300}),
     lens({1, 1, 1, 1, 1, 1, 1, 1, 1})},
    {"h1_sq1_page64_f16_b16", 1, 512, 64, 64, DType::f16, DType::f16, random_lens(16, 1, 2500, 24), ones(16)},
};

INSTANTIATE_TEST_SUITE_P(Cuda, CudaDecode,
                         ::testing::Combine(::testing::Values("cuda", "hopper"), ::testing::ValuesIn(kCases)),
                         [](const ::testing::TestParamInfo<std::tuple<const char*, DecodeCase>>& info) {
                           return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
                         });

// A small case for compute-sanitizer (memcheck, racecheck): splits, fp8,
// causal s_q > 1 and a partial last tile, all in a few CTAs' work.
// Each backend of this GPU; page 64 with a bf16 cache is hopper's wgmma kernel,
// with an fp8 cache (8 heads x 2 tokens: at most 16 rows) its key-major kernel.
TEST(CudaDecodeSmall, SanitizerCase) {
  LATTN_REQUIRE_GPU();
  for (const std::string& name : backends_here()) {
    for (auto [cache_dtype, page] : {std::pair{DType::bf16, 16}, std::pair{DType::fp8_e4m3, 16},
                                     std::pair{DType::bf16, 64}, std::pair{DType::fp8_e4m3, 64}}) {
      const int heads = cache_dtype == DType::fp8_e4m3 && page == 64 ? 8 : 16;
      const DecodeCase c{"small", heads, 512, 64, page, DType::bf16, cache_dtype, lens({300, 5, 70}), lens({2, 1, 2})};
      std::mt19937_64 rng(99);
      auto b = make_batch(c, rng);
      auto backend = make_backend(*b, nullptr, name);
      OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
      OwnedTensor lse = OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu);
      run_and_check(*backend, *b, out, lse,
                    (name + " " + dtype_name(cache_dtype) + " page " + std::to_string(page)).c_str());
    }
  }
}

// NaN in an fp8 cache (the e4m3 NaN byte 0x7f) reaches exactly the rows
// that see its key (docs/mla.md, "NaN and inf"): a context key's NaN makes
// every row of its request NaN, a request's last key's NaN only the last
// query token's rows (s_q = 2: the first token must not see it, through
// neither its score nor 0 * NaN in P V). Both backends, pages of 64 (hopper's
// key-major fp8 kernel).
TEST(CudaDecodeSmall, Fp8CacheNaNReachesOnlyRowsThatSeeIt) {
  LATTN_REQUIRE_GPU();
  for (const std::string& name : backends_here()) {
    const DecodeCase c{"fp8_nan", 8, 512, 64, 64, DType::bf16, DType::fp8_e4m3, lens({200, 130, 70}), lens({2, 2, 1})};
    std::mt19937_64 rng(7);
    auto b = make_batch(c, rng);
    const int D = b->L + b->R;
    auto plant = [&](int r, int key, int col) {
      const int64_t block = b->table[size_t(r) * b->max_blocks + key / b->bs];
      static_cast<uint8_t*>(b->cache_host.data())[(block * b->bs + key % b->bs) * D + col] = 0x7f;
    };
    plant(0, 199, 5);    // request 0's last key, a V column: only token 1 sees it
    plant(1, 129, 530);  // request 1's last key, a k_pe column: only token 1 sees it
    plant(2, 3, 100);    // request 2's context: every row
    copy_tensor(b->cache_host.tensor(), b->cache_dev.tensor());
    auto backend = make_backend(*b, nullptr, name);
    OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
    OwnedTensor lse = OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu);
    run_and_check(*backend, *b, out, lse, (name + " fp8 NaN").c_str());
    // The check above compares NaN positions with the reference; make sure there are some.
    OwnedTensor host = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype);
    copy_tensor(out.tensor(), host.tensor());
    int nan_rows = 0;
    for (int row = 0; row < b->T * b->H; ++row)
      nan_rows += std::isnan(load_as_f32(host.data(), b->dtype, int64_t(row) * b->L));
    EXPECT_EQ(nan_rows, 3 * b->H) << name << ": rows of tokens 1, 3 and 4";
  }
}

// A batch of one request with many key tiles: on a device whose DRAM peaks
// above 4 TB/s (an H200) hopper runs the key-major 16-bit kernel (plan,
// attention, then the combine kernel's block path: ~130 splits per row),
// elsewhere the one-launch kernel; the other path on the same case too.
// H16, 55000 keys: 860 64-key tiles, at least 6 per SM up to 143 SMs.
TEST(CudaDecodeSmall, LongBatchOfOneTakesItsDevicesPath) {
  LATTN_REQUIRE_GPU();
  if (backend_unusable("hopper").size()) GTEST_SKIP() << backend_unusable("hopper");
  const DecodeCase c{"long-batch-of-one", 16, 512, 64, 64, DType::bf16, DType::bf16, lens({55000}), ones(1)};
  std::mt19937_64 rng(77);
  auto b = make_batch(c, rng);
  auto backend = make_backend(*b, nullptr, "hopper");
  OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
  OwnedTensor lse = OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu);
  run_and_check(*backend, *b, out, lse, c.name);
  // The rule reads the DRAM peak (cuda_decode_backend.cpp); here the two
  // GPUs it was measured on, by name: an H200 (4.8 TB/s), an H100 (3.35).
  // A forced tile configuration or one-launch setting (the GPU check's
  // LATTN_DECODE_TILES passes) may choose another path: then only the results
  // are checked.
  const CudaDeviceInfo dev = query_cuda_devices().devices.at(0);
  const int tiles = (55000 + 63) / 64;
  const bool forced = std::getenv("LATTN_DECODE_TILES") != nullptr || std::getenv("LATTN_DECODE_FUSED") != nullptr ||
                      std::getenv("LATTN_DECODE_FUSED_MAX_BATCH") != nullptr ||
                      std::getenv("LATTN_HOPPER_KM16") != nullptr;
  if (!forced && dev.name.find("H200") != std::string::npos && tiles >= 6 * dev.sm_count) {
    EXPECT_EQ(backend->kernel_label().rfind(std::string("hopper: ") + kKm16Label, 0), 0u) << backend->kernel_label();
  } else if (!forced && dev.name.find("H100") != std::string::npos) {
    EXPECT_TRUE(runs_fused(*backend)) << backend->kernel_label();
  }
  // The other path on the same case.
  ScopedEnv other("LATTN_HOPPER_KM16", runs_fused(*backend) ? "1" : "0");
  randomize(*b, c.seq_lens, c.s_q, rng);
  run_and_check(*backend, *b, out, lse, c.name);
}

// hopper's key-major 16-bit kernel (forced: these small batches would take
// the one-launch kernel), a small case for compute-sanitizer: splits, causal
// s_q > 1, partial last tiles, an empty context, 16-bit caches of both dtypes.
TEST(CudaDecodeSmall, KeyMajor16SanitizerCase) {
  LATTN_REQUIRE_GPU();
  if (backend_unusable("hopper").size()) GTEST_SKIP() << backend_unusable("hopper");
  ScopedEnv on("LATTN_HOPPER_KM16", "1");
  for (DType dtype : {DType::bf16, DType::f16}) {
    const DecodeCase c{"km16-small", 8, 512, 64, 64, dtype, dtype, lens({300, 5, 2, 70}), lens({2, 1, 2, 2})};
    std::mt19937_64 rng(98);
    auto b = make_batch(c, rng);
    auto backend = make_backend(*b, nullptr, "hopper");
    OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
    OwnedTensor lse = OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu);
    run_and_check(*backend, *b, out, lse, dtype_name(dtype));
    EXPECT_EQ(backend->kernel_label().rfind(std::string("hopper: ") + kKm16Label, 0), 0u) << backend->kernel_label();
  }
}

// NaN in a 16-bit cache on the key-major kernel reaches exactly the rows
// that see its key (docs/mla.md, "NaN and inf"): a context key's NaN every
// row of its request, a request's last key's NaN (in a V column, or in a
// k_pe column) only its last query token's rows (s_q = 2: the first token
// must not see it, through neither its score nor 0 * NaN in P V).
TEST(CudaDecodeSmall, KeyMajor16NaNReachesOnlyRowsThatSeeIt) {
  LATTN_REQUIRE_GPU();
  if (backend_unusable("hopper").size()) GTEST_SKIP() << backend_unusable("hopper");
  ScopedEnv on("LATTN_HOPPER_KM16", "1");
  const DecodeCase c{"km16_nan", 8, 512, 64, 64, DType::bf16, DType::bf16, lens({200, 130, 70}), lens({2, 2, 1})};
  std::mt19937_64 rng(8);
  auto b = make_batch(c, rng);
  const int D = b->L + b->R;
  auto plant = [&](int r, int key, int col, uint16_t bits) {
    const int64_t block = b->table[size_t(r) * b->max_blocks + key / b->bs];
    static_cast<uint16_t*>(b->cache_host.data())[(block * b->bs + key % b->bs) * D + col] = bits;
  };
  plant(0, 199, 5, 0x7fc0);    // request 0's last key, a V column: only token 1 sees it
  plant(1, 129, 530, 0x7fc0);  // request 1's last key, a k_pe column: only token 1 sees it
  plant(2, 3, 100, 0x7fc0);    // request 2's context: every row
  copy_tensor(b->cache_host.tensor(), b->cache_dev.tensor());
  auto backend = make_backend(*b, nullptr, "hopper");
  OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
  OwnedTensor lse = OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu);
  run_and_check(*backend, *b, out, lse, "km16 NaN");
  EXPECT_EQ(backend->kernel_label().rfind(std::string("hopper: ") + kKm16Label, 0), 0u) << backend->kernel_label();
  OwnedTensor host = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype);
  copy_tensor(out.tensor(), host.tensor());
  int nan_rows = 0;
  for (int row = 0; row < b->T * b->H; ++row)
    nan_rows += std::isnan(load_as_f32(host.data(), b->dtype, int64_t(row) * b->L));
  EXPECT_EQ(nan_rows, 3 * b->H) << "rows of tokens 1, 3 and 4";
}

// An undefined LSE is allowed; the output alone is written.
TEST(CudaDecodeSmall, LseIsOptional) {
  LATTN_REQUIRE_GPU();
  const DecodeCase c{"nolse", 16, 512, 64, 64, DType::bf16, DType::bf16, lens({3000, 17}), ones(2)};
  std::mt19937_64 rng(5);
  auto b = make_batch(c, rng);
  auto backend = make_backend(*b);
  OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
  test::poison(out.tensor());
  backend->prepare_metadata(b->md);
  backend->run(b->q_nope_dev, b->q_pe_dev, b->cache(), b->md, out.tensor(), Tensor{});
  detail::cuda_device_ops().synchronize(nullptr);
  OwnedTensor want, want_lse;
  reference_decode(*b, want, want_lse);
  const test::ErrorReport e = test::compare(out.tensor(), want.tensor());
  EXPECT_EQ(e.nan_mismatches, 0) << e.str();
  EXPECT_LE(e.rel_l2, test::rel_tolerance(DType::bf16)) << e.str();
}

// Bad arguments are refused with the argument's name, before any launch.
TEST(CudaDecodeSmall, RefusesBadArguments) {
  LATTN_REQUIRE_GPU();
  const DecodeCase c{"bad", 16, 512, 64, 64, DType::bf16, DType::bf16, lens({100}), ones(1)};
  std::mt19937_64 rng(5);
  auto b = make_batch(c, rng);
  auto backend = make_backend(*b);
  OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
  OwnedTensor wrong = OwnedTensor::empty({b->T, b->H, b->L + 1}, b->dtype, kGpu);
  backend->prepare_metadata(b->md);
  try {
    backend->run(b->q_nope_dev, b->q_pe_dev, b->cache(), b->md, wrong.tensor(), Tensor{});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'out'"), std::string::npos) << e.what();
  }
  OwnedTensor host_q = OwnedTensor::empty({b->T, b->H, b->R}, b->dtype);
  EXPECT_THROW(backend->run(b->q_nope_dev, host_q.tensor(), b->cache(), b->md, out.tensor(), Tensor{}), ValueError);
}

// The class: registered as "cuda", sm80+, graphs, any dims and block sizes.
TEST(CudaDecodeClass, DeclaresWhatItSupports) {
  if (!built_with_cuda()) GTEST_SKIP() << "no GPU test: lattn was built without CUDA";
  const DecodeBackendClass& cls = *mla_decode_backend_registry().get_class("cuda");
  EXPECT_EQ(cls.name(), "cuda");
  EXPECT_TRUE(cls.supports_cuda_graphs());
  EXPECT_TRUE(cls.supports_quant_output(QuantKey::fp8_e4m3_static_per_tensor));
  EXPECT_FALSE(cls.supports_compute_capability(DeviceCapability{7, 5}));
  EXPECT_TRUE(cls.supports_compute_capability(DeviceCapability{8, 0}));
  EXPECT_TRUE(cls.supports_compute_capability(DeviceCapability{9, 0}));
  EXPECT_FALSE(cls.supports_compute_capability(std::nullopt));
  SelectorConfig cfg = SelectorConfig::for_dims(MlaDims::minicpm3(), DType::bf16, DType::fp8_e4m3, kGpu, 1, 4);
  EXPECT_TRUE(cls.validate_configuration(DeviceCapability{9, 0}, cfg).empty());
  const auto reasons = cls.validate_configuration(DeviceCapability{7, 0}, cfg);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0], "compute capability 7.0 not supported");
}

// The hopper class: registered as "hopper", sm90 only, graphs, and (built
// with sm_90a code) available; it serves what cuda serves (it delegates).
TEST(CudaDecodeClass, HopperDeclaresWhatItSupports) {
  if (!built_with_cuda()) GTEST_SKIP() << "no GPU test: lattn was built without CUDA";
  const DecodeBackendClass& cls = *mla_decode_backend_registry().get_class("hopper");
  EXPECT_EQ(cls.name(), "hopper");
  EXPECT_TRUE(cls.is_available());  // the default arch list (80;90a) builds its kernel
  EXPECT_TRUE(cls.supports_cuda_graphs());
  EXPECT_FALSE(cls.supports_compute_capability(DeviceCapability{8, 0}));
  EXPECT_TRUE(cls.supports_compute_capability(DeviceCapability{9, 0}));
  EXPECT_FALSE(cls.supports_compute_capability(DeviceCapability{10, 0}));
  EXPECT_FALSE(cls.supports_compute_capability(std::nullopt));
  SelectorConfig cfg = SelectorConfig::for_dims(MlaDims::minicpm3(), DType::bf16, DType::fp8_e4m3, kGpu, 1, 4);
  EXPECT_TRUE(cls.validate_configuration(DeviceCapability{9, 0}, cfg).empty());
  const auto reasons = cls.validate_configuration(DeviceCapability{8, 0}, cfg);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0], "compute capability 8.0 not supported");
}

// --- CUDA graphs -------------------------------------------------------------

// The plan and the attention captured once, replayed with new seq_lens,
// block tables, cache contents and queries written into the same buffers.
TEST(CudaDecodeGraph, CapturedPlanAndRunReplayWithNewMetadata) {
  LATTN_REQUIRE_GPU();
  for (const std::string& name : backends_here()) {
    for (auto [cache_dtype, page] :
         {std::pair{DType::bf16, 16}, std::pair{DType::fp8_e4m3, 16}, std::pair{DType::bf16, 64}}) {
      SCOPED_TRACE(name + " page " + std::to_string(page));
      cuda::StreamHandle stream(0);
      // Page 64 with 32 heads: hopper's wgmma kernel (16 heads would run the cuda kernel).
      const DecodeCase c{"graph",     page == 64 ? 32 : 16,       512,    64, page, DType::bf16,
                         cache_dtype, random_lens(6, 1, 600, 10), ones(6)};
      std::mt19937_64 rng(77);
      auto b = make_batch(c, rng, /*capacity_blocks=*/2240 / page);  // room for 2200 keys per request
      auto backend = make_backend(*b, stream.get(), name);
      OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
      OwnedTensor lse = OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu);
      run_and_check(*backend, *b, out, lse, "eager warm-up", true, nullptr, stream.get());

      cuda::CapturedGraph graph;
      graph.begin(stream.get());
      backend->prepare_metadata(b->md);
      backend->run(b->q_nope_dev, b->q_pe_dev, b->cache(), b->md, out.tensor(), lse.tensor());
      graph.end();
      // plan, attention, combine; or the one-launch kernel (16 heads, page 16, bf16 cache on sm90)
      EXPECT_EQ(graph.num_kernel_nodes(), runs_fused(*backend) ? 1 : 3);
      for (int step = 0; step < 3; ++step) {
        // Very different lengths each replay: 1 key up to the capacity.
        std::vector<int> new_lens = random_lens(6, 1, 2200, 100 + uint64_t(step));
        new_lens[size_t(step)] = 2200;
        randomize(*b, new_lens, ones(6), rng);
        run_and_check(*backend, *b, out, lse, "replay", false, &graph, stream.get());
      }
    }
  }
}

// hopper's key-major 16-bit kernel captured with its plan and combine (three
// nodes), replayed with very different lengths (one request of one key up to
// a split one of 9000).
TEST(CudaDecodeGraph, KeyMajor16CapturedStepReplays) {
  LATTN_REQUIRE_GPU();
  if (backend_unusable("hopper").size()) GTEST_SKIP() << backend_unusable("hopper");
  ScopedEnv on("LATTN_HOPPER_KM16", "1");
  cuda::StreamHandle stream(0);
  const DecodeCase c{"km16-graph", 16, 512, 64, 64, DType::bf16, DType::bf16, random_lens(5, 1, 600, 12), ones(5)};
  std::mt19937_64 rng(80);
  auto b = make_batch(c, rng, /*capacity_blocks=*/9000 / 64 + 1);
  auto backend = make_backend(*b, stream.get(), "hopper");
  OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
  OwnedTensor lse = OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu);
  run_and_check(*backend, *b, out, lse, "eager warm-up", true, nullptr, stream.get());
  EXPECT_EQ(backend->kernel_label().rfind(std::string("hopper: ") + kKm16Label, 0), 0u) << backend->kernel_label();
  cuda::CapturedGraph graph;
  graph.begin(stream.get());
  backend->prepare_metadata(b->md);
  backend->run(b->q_nope_dev, b->q_pe_dev, b->cache(), b->md, out.tensor(), lse.tensor());
  graph.end();
  EXPECT_EQ(graph.num_kernel_nodes(), 3);  // plan, attention, combine
  for (int step = 0; step < 3; ++step) {
    std::vector<int> new_lens = random_lens(5, 1, 9000, 400 + uint64_t(step));
    new_lens[size_t(step)] = 9000;
    new_lens[size_t(step) + 1] = 1;
    randomize(*b, new_lens, ones(5), rng);
    run_and_check(*backend, *b, out, lse, "replay", false, &graph, stream.get());
  }
}

// Only run() captured; prepare_metadata re-plans outside before each replay.
TEST(CudaDecodeGraph, CapturedRunReplaysWithPlanOutside) {
  LATTN_REQUIRE_GPU();
  for (const std::string& name : backends_here()) {
    SCOPED_TRACE(name);
    cuda::StreamHandle stream(0);
    const DecodeCase c{"graph-run", 128, 512, 64, 64, DType::bf16, DType::bf16, random_lens(4, 1, 500, 11), ones(4, 2)};
    std::mt19937_64 rng(78);
    auto b = make_batch(c, rng, /*capacity_blocks=*/40);
    auto backend = make_backend(*b, stream.get(), name);
    OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
    OwnedTensor lse = OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu);
    run_and_check(*backend, *b, out, lse, "eager warm-up", true, nullptr, stream.get());
    cuda::CapturedGraph graph;
    graph.begin(stream.get());
    backend->run(b->q_nope_dev, b->q_pe_dev, b->cache(), b->md, out.tensor(), lse.tensor());
    graph.end();
    EXPECT_EQ(graph.num_kernel_nodes(), 2);  // attention, combine
    for (int step = 0; step < 3; ++step) {
      randomize(*b, random_lens(4, 2, 2500, 200 + uint64_t(step)), ones(4, 2), rng);
      backend->prepare_metadata(b->md);
      run_and_check(*backend, *b, out, lse, "replay", false, &graph, stream.get());
    }
  }
}

// One plan per step for all layers (docs/cuda.md, "One plan per step"): the
// layers (backend instances) of a step share the first layer's device plan;
// a new step, metadata edited in place and a capture plan again; two steps
// interleaved over the layers (the first layer's plan store overwritten by
// the other step) make the next layer plan again; a captured step of several
// layers holds one planning kernel and replays correctly with new lengths.
TEST(CudaDecodePlan, OncePerStepForAllLayers) {
  LATTN_REQUIRE_GPU();
  // The planning kernel's sharing (the one-launch kernel that this small batch
  // would get on sm90 launches none: CudaDecodeFused below).
  ScopedEnv no_fused("LATTN_DECODE_FUSED", "0");
  constexpr int kLayers = 4;
  for (const std::string& name : backends_here()) {
    SCOPED_TRACE(name);
    cuda::StreamHandle stream(0);
    const DecodeCase c{"layers", 16, 512, 64, 16, DType::bf16, DType::bf16, random_lens(5, 1, 700, 31), ones(5)};
    const DecodeCase c2{"layers-2", 16, 512, 64, 16, DType::bf16, DType::bf16, random_lens(5, 1, 900, 32), ones(5)};
    std::mt19937_64 rng(79);
    auto b = make_batch(c, rng, /*capacity_blocks=*/60);
    auto b2 = make_batch(c2, rng);
    std::vector<std::unique_ptr<DecodeBackend>> layers;
    std::vector<OwnedTensor> outs, lses;
    for (int k = 0; k < kLayers; ++k) {
      layers.push_back(make_backend(*b, stream.get(), name));
      outs.push_back(OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu));
      lses.push_back(OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu));
    }
    auto launched = [&](int k) { return cuda::decode_plans_launched(*layers[size_t(k)]); };
    auto expect_launched = [&](std::vector<int64_t> want, const char* what) {
      for (int k = 0; k < kLayers; ++k) EXPECT_EQ(launched(k), want[size_t(k)]) << what << ", layer " << k;
    };
    auto step = [&](DecodeBatch& batch, const char* what) {
      for (int k = 0; k < kLayers; ++k)
        run_and_check(*layers[size_t(k)], batch, outs[size_t(k)], lses[size_t(k)], what, true, nullptr, stream.get());
    };
    step(*b, "step 1");
    expect_launched({1, 0, 0, 0}, "step 1");
    b->md.plans = std::make_shared<StepPlans>();  // a new step
    step(*b, "step 2");
    expect_launched({2, 0, 0, 0}, "step 2");
    randomize(*b, random_lens(5, 1, 950, 33), ones(5), rng);  // lengths edited in place
    step(*b, "edited in place");
    expect_launched({3, 0, 0, 0}, "edited in place");
    // Two steps interleaved layer by layer: b2's first layer overwrites the
    // store b's plan lives in, so b's second layer plans (into its own store).
    for (int k = 0; k < kLayers; ++k) {
      run_and_check(*layers[size_t(k)], *b, outs[size_t(k)], lses[size_t(k)], "interleaved b", true, nullptr,
                    stream.get());
      run_and_check(*layers[size_t(k)], *b2, outs[size_t(k)], lses[size_t(k)], "interleaved b2", true, nullptr,
                    stream.get());
    }
    expect_launched({4, 1, 0, 0}, "interleaved");

    // A captured step of all layers: one planning kernel, then attention +
    // combine per layer; replayed with new lengths written in place.
    b->md.plans = std::make_shared<StepPlans>();
    step(*b, "warm-up");
    cuda::CapturedGraph graph;
    graph.begin(stream.get());
    for (int k = 0; k < kLayers; ++k) {
      layers[size_t(k)]->prepare_metadata(b->md);
      layers[size_t(k)]->run(b->q_nope_dev, b->q_pe_dev, b->cache(), b->md, outs[size_t(k)].tensor(),
                             lses[size_t(k)].tensor());
    }
    graph.end();
    EXPECT_EQ(graph.num_kernel_nodes(), 1 + 2 * kLayers);
    for (int replay = 0; replay < 2; ++replay) {
      randomize(*b, random_lens(5, 1, 950, 40 + uint64_t(replay)), ones(5), rng);
      for (int k = 0; k < kLayers; ++k) {
        run_and_check(*layers[size_t(k)], *b, outs[size_t(k)], lses[size_t(k)], "replay", false, &graph, stream.get());
      }
    }
  }
}

// Whole-request plans (smxx/decode_scheduler.cu): a batch of twice as many
// requests as the plan has parts, all of the same cost, is planned with no
// request split (nothing to combine) and matches the reference; the same
// shape with random lengths gets a mixed plan (some requests split, some
// whole) whose combine also matches. H32: hopper's wgmma kernel, the cuda
// backend's mma.sync kernel.
TEST(CudaDecodePlan, WholeRequestPlanAtLargeBatchAndMixedPlan) {
  LATTN_REQUIRE_GPU();
  for (const std::string& name : backends_here()) {
    SCOPED_TRACE(name);
    std::mt19937_64 rng(91);
    // The plan's parts for this layer (they do not depend on the batch).
    const DecodeCase probe{"probe", 32, 512, 64, 64, DType::bf16, DType::bf16, ones(40, 100), ones(40)};
    auto pb = make_batch(probe, rng);
    auto pbackend = make_backend(*pb, nullptr, name);
    pbackend->prepare_metadata(pb->md);
    const int parts = cuda::decode_plan_num_parts(*pbackend);
    ASSERT_GT(parts, 0);
    const size_t batch = size_t(2 * parts);
    auto count = [](const std::vector<int32_t>& v, bool split) {
      return std::count_if(v.begin(), v.end(), [&](int32_t n) { return split ? n >= 2 : n == 1; });
    };

    // Requests of the same cost (20 tiles of 64 keys, + 4 fixed: 24 units),
    // slightly fewer than 2 per part: B = 2P - P/20 puts W = ceil(24 B / P)
    // at 47, so part boundaries p * W fall inside requests (the even split
    // would split most of them), while whole requests fill the parts with at
    // most 48 <= W + W/16: the planner keeps every request whole.
    const size_t batch_even = size_t(2 * parts - parts / 20);
    const DecodeCase even{
        "even", 32, 512, 64, 64, DType::bf16, DType::bf16, random_lens(batch_even, 1217, 1280, 92), ones(batch_even)};
    auto b = make_batch(even, rng);
    auto backend = make_backend(*b, nullptr, name);
    OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
    OwnedTensor lse = OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu);
    run_and_check(*backend, *b, out, lse, "whole-request plan");
    std::vector<int32_t> splits = cuda::decode_plan_num_splits(*backend);
    ASSERT_EQ(splits.size(), batch_even);
    EXPECT_EQ(count(splits, false), int64_t(batch_even)) << "every request in one part";
    {
      // The same batch with whole-request plans off: the even split splits requests.
      ScopedEnv always_split("LATTN_DECODE_WHOLE", "0");
      run_and_check(*backend, *b, out, lse, "the same batch split evenly");
      EXPECT_GT(count(cuda::decode_plan_num_splits(*backend), true), 0);
    }

    // Random lengths: the fullest whole-request part would exceed W by far
    // more than 1/16, so requests are split at part boundaries.
    const DecodeCase mixed{"mixed",    32, 512, 64, 64, DType::bf16, DType::bf16, random_lens(batch, 1, 500, 93),
                           ones(batch)};
    auto bm = make_batch(mixed, rng);
    auto mbackend = make_backend(*bm, nullptr, name);
    OwnedTensor mout = OwnedTensor::empty({bm->T, bm->H, bm->L}, bm->dtype, kGpu);
    OwnedTensor mlse = OwnedTensor::empty({bm->H, bm->T}, DType::f32, kGpu);
    run_and_check(*mbackend, *bm, mout, mlse, "mixed plan");
    splits = cuda::decode_plan_num_splits(*mbackend);
    ASSERT_EQ(splits.size(), batch);
    EXPECT_GT(count(splits, true), 0) << "some requests split";
    EXPECT_GT(count(splits, false), 0) << "some requests whole";
  }
}

// The one-launch small-batch kernel (smxx/decode_fused.h: sm90, at most 16
// rows per request, a cache of the activation dtype): batches of 1 (one
// request split over every SM, merged after the grid barrier), 3 with an
// empty request and pages of 16, and 32 (the limit raised; 7 heads) against
// the float64 loop on hostile data; no planning kernel in any layer; a
// captured step is one kernel node per layer and replays with new lengths.
TEST(CudaDecodeFused, OneLaunchMatchesReferenceAndReplays) {
  LATTN_REQUIRE_GPU();
  if (device_capability(0)->major != 9) GTEST_SKIP() << "the one-launch decode kernel is sm90 only";
  ScopedEnv max_batch("LATTN_DECODE_FUSED_MAX_BATCH", "32");
  const DecodeCase cases[] = {
      {"fused-b1", 16, 512, 64, 64, DType::bf16, DType::bf16, lens({30000}), ones(1)},
      {"fused-b3-empty", 16, 512, 64, 16, DType::f16, DType::f16, lens({0, 5000, 1}), ones(3)},
      {"fused-b32", 7, 512, 64, 32, DType::bf16, DType::bf16, random_lens(32, 1, 3000, 21), ones(32)},
  };
  constexpr int kLayers = 2;
  for (const std::string& name : backends_here()) {
    for (const DecodeCase& c : cases) {
      SCOPED_TRACE(name + " " + c.name);
      cuda::StreamHandle stream(0);
      std::mt19937_64 rng(606);
      const int max_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
      auto b = make_batch(c, rng, /*capacity_blocks=*/(max_len + c.block_size - 1) / c.block_size);
      std::vector<std::unique_ptr<DecodeBackend>> layers;
      std::vector<OwnedTensor> outs, lses;
      for (int k = 0; k < kLayers; ++k) {
        layers.push_back(make_backend(*b, stream.get(), name));
        outs.push_back(OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu));
        lses.push_back(OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu));
      }
      for (int k = 0; k < kLayers; ++k) {
        run_and_check(*layers[size_t(k)], *b, outs[size_t(k)], lses[size_t(k)], "eager", true, nullptr, stream.get());
        EXPECT_TRUE(runs_fused(*layers[size_t(k)])) << layers[size_t(k)]->kernel_label();
        EXPECT_EQ(cuda::decode_plans_launched(*layers[size_t(k)]), 0);
      }
      cuda::CapturedGraph graph;
      graph.begin(stream.get());
      for (int k = 0; k < kLayers; ++k) {
        layers[size_t(k)]->prepare_metadata(b->md);
        layers[size_t(k)]->run(b->q_nope_dev, b->q_pe_dev, b->cache(), b->md, outs[size_t(k)].tensor(),
                               lses[size_t(k)].tensor());
      }
      graph.end();
      EXPECT_EQ(graph.num_kernel_nodes(), kLayers);
      for (int replay = 0; replay < 2; ++replay) {
        std::vector<int> new_lens = random_lens(c.seq_lens.size(), 0, max_len, 300 + uint64_t(replay));
        new_lens[size_t(replay) % new_lens.size()] = max_len;
        randomize(*b, new_lens, c.s_q, rng);
        for (int k = 0; k < kLayers; ++k) {
          run_and_check(*layers[size_t(k)], *b, outs[size_t(k)], lses[size_t(k)], "replay", false, &graph,
                        stream.get());
        }
      }
    }
  }
}

// A small case of the one-launch kernel for compute-sanitizer (memcheck,
// racecheck, synccheck): an empty request, a one-tile one and one split over
// every part (W = 1 tile), each part then merging a share after the barrier.
TEST(CudaDecodeFused, SanitizerCase) {
  LATTN_REQUIRE_GPU();
  if (device_capability(0)->major != 9) GTEST_SKIP() << "the one-launch decode kernel is sm90 only";
  const DecodeCase c{"fused-small", 16, 512, 64, 64, DType::bf16, DType::bf16, lens({700, 0, 90}), ones(3)};
  std::mt19937_64 rng(607);
  auto b = make_batch(c, rng);
  auto backend = make_backend(*b, nullptr, "cuda");
  OwnedTensor out = OwnedTensor::empty({b->T, b->H, b->L}, b->dtype, kGpu);
  OwnedTensor lse = OwnedTensor::empty({b->H, b->T}, DType::f32, kGpu);
  run_and_check(*backend, *b, out, lse, c.name);
  EXPECT_TRUE(runs_fused(*backend)) << backend->kernel_label();
}

// The whole decode step in one graph: cache write of the new tokens
// (concat_and_cache_mla), absorption GEMM (q_nope . W_UK_T), attention with
// its plan and combine, and the V up-projection (. W_UV); replayed for three
// steps as a real decode loop (every sequence grows by one token per step).
TEST(CudaDecodeGraph, WholeDecodeStepReplays) {
  LATTN_REQUIRE_GPU();
  const int B = 5, H = 16, L = 512, R = 64, P = 128, V = 128, bs = 16, steps = 3;
  cuda::StreamHandle stream(0);
  std::mt19937_64 rng(4242);
  std::vector<int> start_lens = {40, 1, 300, 17, 129};
  const DecodeCase c{"step", H, L, R, bs, DType::bf16, DType::bf16, start_lens, ones(B)};
  auto b = make_batch(c, rng, /*capacity_blocks=*/30);
  auto backend = make_backend(*b, stream.get());
  // Weights and per-step inputs.
  OwnedTensor w_uk_t = OwnedTensor::empty({H, P, L}, DType::bf16), w_uv = OwnedTensor::empty({H, L, V}, DType::bf16);
  test::fill_normal(w_uk_t.tensor(), rng, 0.09f);
  test::fill_normal(w_uv.tensor(), rng, 0.05f);
  OwnedTensor w_uk_t_d = test::to_device(w_uk_t.tensor()), w_uv_d = test::to_device(w_uv.tensor());
  OwnedTensor q_nope = OwnedTensor::empty({B, H, P}, DType::bf16), q_pe = OwnedTensor::empty({B, H, R}, DType::bf16);
  OwnedTensor kv_c = OwnedTensor::empty({B, L}, DType::bf16), k_pe = OwnedTensor::empty({B, R}, DType::bf16);
  OwnedTensor slots = OwnedTensor::empty({B}, DType::i64);
  OwnedTensor q_nope_d = OwnedTensor::empty({B, H, P}, DType::bf16, kGpu);
  OwnedTensor kv_c_d = OwnedTensor::empty({B, L}, DType::bf16, kGpu),
              k_pe_d = OwnedTensor::empty({B, R}, DType::bf16, kGpu);
  OwnedTensor slots_d = OwnedTensor::empty({B}, DType::i64, kGpu);
  OwnedTensor ql = OwnedTensor::empty({H, B, L}, DType::bf16, kGpu);  // absorption output, [T, H, L] view below
  OwnedTensor o_lat = OwnedTensor::empty({B, H, L}, DType::bf16, kGpu);
  OwnedTensor out = OwnedTensor::empty({B, H, V}, DType::f32, kGpu);
  OwnedTensor lse = OwnedTensor::empty({H, B}, DType::f32, kGpu);
  const LatentCache cache = b->cache();
  const RunContext ctx{kGpu, stream.get(), 0};

  auto issue_step = [&] {
    detail::cuda_device_ops().concat_and_cache_mla(kv_c_d.tensor(), k_pe_d.tensor(), cache, slots_d.tensor(),
                                                   stream.get());
    detail::GemmProblem absorb;  // per head h: q_nope[:, h, :] [B, P] . W_UK_T[h] [P, L] -> ql[h] [B, L]
    absorb.m = B, absorb.n = L, absorb.k = P, absorb.batch = H;
    absorb.a = q_nope_d.data(), absorb.a_dtype = DType::bf16, absorb.lda = H * P, absorb.batch_stride_a = P;
    absorb.b = w_uk_t_d.data(), absorb.b_dtype = DType::bf16, absorb.ldb = L, absorb.batch_stride_b = int64_t(P) * L;
    absorb.c = ql.data(), absorb.c_dtype = DType::bf16, absorb.ldc = L, absorb.batch_stride_c = int64_t(B) * L;
    detail::gemm(absorb, ctx);
    backend->prepare_metadata(b->md);
    backend->run(ql.tensor().transpose(0, 1), b->q_pe_dev, cache, b->md, o_lat.tensor(), lse.tensor());
    detail::GemmProblem up;  // per head h: o_lat[:, h, :] [B, L] . W_UV[h] [L, V] -> out[:, h, :]
    up.m = B, up.n = V, up.k = L, up.batch = H;
    up.a = o_lat.data(), up.a_dtype = DType::bf16, up.lda = H * L, up.batch_stride_a = L;
    up.b = w_uv_d.data(), up.b_dtype = DType::bf16, up.ldb = V, up.batch_stride_b = int64_t(L) * V;
    up.c = out.data(), up.c_dtype = DType::f32, up.ldc = H * V, up.batch_stride_c = V;
    detail::gemm(up, ctx);
  };
  // New per-step values: the step's token is the last key of each sequence.
  std::vector<int> cur = start_lens;
  auto new_inputs = [&] {
    test::fill_normal(q_nope.tensor(), rng);
    test::fill_normal(q_pe.tensor(), rng);
    test::fill_normal(kv_c.tensor(), rng);
    test::fill_normal(k_pe.tensor(), rng);
    for (int r = 0; r < B; ++r) {
      const int pos = cur[size_t(r)] - 1;
      slots.data_as<int64_t>()[r] = int64_t(b->table[size_t(r) * b->max_blocks + pos / bs]) * bs + pos % bs;
    }
    copy_tensor(q_nope.tensor(), q_nope_d.tensor());
    copy_tensor(q_pe.tensor(), b->q_pe_dev);
    copy_tensor(kv_c.tensor(), kv_c_d.tensor());
    copy_tensor(k_pe.tensor(), k_pe_d.tensor());
    copy_tensor(slots.tensor(), slots_d.tensor());
  };
  // float64 reference of the whole step, from the host cache (updated here
  // with the step's token exactly as the cache write stores it).
  auto check = [&](const char* what) {
    const int D = L + R;
    for (int r = 0; r < B; ++r) {
      const int64_t slot = slots.data_as<int64_t>()[r];
      for (int d = 0; d < D; ++d) {
        const float x = d < L ? load_as_f32(kv_c.data(), DType::bf16, int64_t(r) * L + d)
                              : load_as_f32(k_pe.data(), DType::bf16, int64_t(r) * R + d - L);
        store_from_f32(b->cache_host.data(), DType::bf16, slot * D + d, x);
      }
    }
    // Absorbed queries in float64 (rounded to bf16, as the GEMM stores them).
    for (int r = 0; r < B; ++r) {
      for (int h = 0; h < H; ++h) {
        for (int l = 0; l < L; ++l) {
          double acc = 0;
          for (int p = 0; p < P; ++p) {
            acc += double(load_as_f32(q_nope.data(), DType::bf16, (int64_t(r) * H + h) * P + p)) *
                   load_as_f32(w_uk_t.data(), DType::bf16, (int64_t(h) * P + p) * L + l);
          }
          store_from_f32(b->q_nope_host.data(), DType::bf16, (int64_t(r) * H + h) * L + l, float(acc));
        }
      }
    }
    copy_host(q_pe.tensor(), b->q_pe_host.tensor());
    OwnedTensor att, att_lse;
    reference_decode(*b, att, att_lse);
    OwnedTensor want = OwnedTensor::empty({B, H, V}, DType::f32);
    for (int r = 0; r < B; ++r) {
      for (int h = 0; h < H; ++h) {
        for (int v = 0; v < V; ++v) {
          double acc = 0;
          for (int l = 0; l < L; ++l) {
            acc += double(att.data_as<float>()[(int64_t(r) * H + h) * L + l]) *
                   load_as_f32(w_uv.data(), DType::bf16, (int64_t(h) * L + l) * V + v);
          }
          want.data_as<float>()[(int64_t(r) * H + h) * V + v] = float(acc);
        }
      }
    }
    const test::ErrorReport e = test::compare(out.tensor(), want.tensor());
    EXPECT_EQ(e.nan_mismatches, 0) << what << ": " << e.str();
    EXPECT_LE(e.rel_l2, test::rel_tolerance(DType::bf16)) << what << ": " << e.str();
    const test::ErrorReport el = test::compare(lse.tensor(), att_lse.tensor());
    EXPECT_LE(el.max_abs, 2e-2) << what << ": LSE " << el.str();
  };
  auto set_lens = [&] {
    std::vector<int32_t> l32(cur.begin(), cur.end());
    std::memcpy(b->seq_lens_host.data(), l32.data(), l32.size() * 4);
    copy_tensor(b->seq_lens_host.tensor(), b->seq_lens_dev.tensor());
    b->seq_lens = cur;
    b->md.max_decode_seq_len = *std::max_element(cur.begin(), cur.end());
  };

  set_lens();
  new_inputs();
  issue_step();  // eager warm-up: sizes the workspace before capture
  stream.synchronize();
  check("eager step");

  cuda::CapturedGraph graph;
  graph.begin(stream.get());
  issue_step();
  graph.end();
  // write, GEMM, plan, attention, combine, GEMM (cuBLAS may add nodes); on
  // sm90 this batch of 5 runs the one-launch decode (plan, attention and
  // combine in one kernel): two nodes fewer.
  EXPECT_GE(graph.num_kernel_nodes(), runs_fused(*backend) ? 4 : 6);
  for (int step = 0; step < steps; ++step) {
    for (int& len : cur) ++len;  // every sequence grows by the token of this step
    set_lens();
    new_inputs();
    test::poison(out.tensor());
    test::poison(lse.tensor());
    graph.replay(stream.get());
    stream.synchronize();
    check("replayed step");
  }
}

}  // namespace
}  // namespace lattn
