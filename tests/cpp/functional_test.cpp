// The kernel-level calls (lattn/functional.h): mla_decode and mla_prefill on
// every backend of a device, each compared with the `reference` backend (fp64
// accumulation) on the same hostile data: permuted block tables, NaN in every
// cache slot no request owns, partial last blocks, an empty context, odd head
// counts, block size 1; outputs poisoned before the call and checked written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "lattn/dtype.h"
#include "lattn/errors.h"
#include "lattn/functional.h"
#include "lattn/ops.h"
#include "support/gpu.h"

namespace lattn {
namespace {

// Host f32 values of any host tensor.
std::vector<float> host_values(const Tensor& t) {
  OwnedTensor host = OwnedTensor::empty(t.shape(), t.dtype());
  copy_tensor(t, host);
  std::vector<float> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = load_as_f32(host.data(), t.dtype(), i);
  return v;
}

// Relative L2 error, with every element finite (poisoned outputs must be overwritten).
double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got[i]) || std::isinf(ref[i])) << "element " << i << " not written: " << got[i];
    if (std::isinf(ref[i]) && got[i] == ref[i]) continue;
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

OwnedTensor random_host(std::initializer_list<int64_t> shape, DType dtype, std::mt19937& rng) {
  OwnedTensor t = OwnedTensor::empty(shape, dtype);
  std::normal_distribution<float> dist;
  for (int64_t i = 0; i < t.tensor().numel(); ++i) store_from_f32(t.data(), dtype, i, dist(rng));
  return t;
}

OwnedTensor on(const Tensor& host, Device device) {
  OwnedTensor t = OwnedTensor::empty(host.shape(), host.dtype(), device);
  copy_tensor(host, t);
  return t;
}

struct DecodeCase {
  int num_heads, L, R, block_size;
  std::vector<int32_t> seq_lens;
};

// Runs mla_decode on `backend` and returns (out, lse) on the host.
std::pair<std::vector<float>, std::vector<float>> run_decode(const DecodeCase& c, const std::string& backend,
                                                             Device device, DType dtype) {
  std::mt19937 rng(7);
  const int B = int(c.seq_lens.size());
  std::vector<int32_t> blocks_per(static_cast<size_t>(B));
  int total = 0, width = 0;
  for (int r = 0; r < B; ++r) {
    blocks_per[size_t(r)] = (c.seq_lens[size_t(r)] + c.block_size - 1) / c.block_size;
    total += blocks_per[size_t(r)];
    width = std::max(width, blocks_per[size_t(r)]);
  }
  const int num_blocks = total + 3;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);  // permuted block tables
  OwnedTensor table = OwnedTensor::zeros({B, width + 1}, DType::i32);
  int at = 0;
  for (int r = 0; r < B; ++r) {
    for (int b = 0; b < blocks_per[size_t(r)]; ++b) table.data_as<int32_t>()[r * (width + 1) + b] = ids[size_t(at++)];
  }
  OwnedTensor lens = OwnedTensor::empty({B}, DType::i32);
  std::copy(c.seq_lens.begin(), c.seq_lens.end(), lens.data_as<int32_t>());
  // The cache: NaN everywhere, then the owned slots.
  OwnedTensor cache = OwnedTensor::empty({num_blocks, c.block_size, c.L + c.R}, DType::bf16);
  fill(cache, std::numeric_limits<float>::quiet_NaN());
  std::normal_distribution<float> dist;
  for (int r = 0; r < B; ++r) {
    for (int p = 0; p < c.seq_lens[size_t(r)]; ++p) {
      const int64_t block = table.data_as<int32_t>()[r * (width + 1) + p / c.block_size];
      for (int e = 0; e < c.L + c.R; ++e) {
        store_from_f32(cache.data(), DType::bf16, (block * c.block_size + p % c.block_size) * (c.L + c.R) + e,
                       dist(rng));
      }
    }
  }
  OwnedTensor q = random_host({B, c.num_heads, c.L + c.R}, dtype, rng);

  DecodePlanParams params;
  params.num_heads = c.num_heads;
  params.kv_lora_rank = c.L;
  params.qk_rope_head_dim = c.R;
  params.dtype = dtype;
  params.kv_cache_dtype = DType::bf16;
  params.device = device;
  params.backend = backend;
  const OwnedTensor d_table = on(table, device), d_lens = on(lens, device), d_cache = on(cache, device),
                    d_q = on(q, device);
  DecodePlan plan(params, d_table, d_lens, c.block_size);
  EXPECT_EQ(plan.backend_name(), backend);
  OwnedTensor out = OwnedTensor::empty({B, c.num_heads, c.L}, dtype, device);
  OwnedTensor lse = OwnedTensor::empty({c.num_heads, B}, DType::f32, device);
  fill(out, std::numeric_limits<float>::quiet_NaN());
  fill(lse, std::numeric_limits<float>::quiet_NaN());
  LatentCache latent{d_cache.tensor(), c.L, c.R, 1.0f};
  mla_decode(d_q, latent, plan, MlaDims::deepseek_v3().softmax_scale(), out, lse);
  return {host_values(out), host_values(lse)};
}

const std::vector<DecodeCase> kDecodeCases = {
    {16, 512, 64, 16, {30, 1, 47, 16}},  // DeepSeek's latent dims; a request with no context
    {3, 64, 16, 1, {5, 9}},              // odd heads, block size 1
    {5, 256, 32, 64, {70, 3}},           // MiniCPM3's dims, partial last blocks
};

TEST(FunctionalDecode, CpuMatchesReference) {
  for (const DecodeCase& c : kDecodeCases) {
    const auto ref = run_decode(c, "reference", Device::cpu(), DType::f32);
    const auto got = run_decode(c, "cpu", Device::cpu(), DType::f32);
    EXPECT_LT(rel_err(got.first, ref.first), 1e-5) << "L=" << c.L;
    EXPECT_LT(rel_err(got.second, ref.second), 1e-5) << "L=" << c.L;
  }
}

TEST(FunctionalDecode, CudaMatchesReference) {
  LATTN_REQUIRE_GPU();
  // The tensor-core decode serves DeepSeek's (512, 64); the others take the generic path.
  for (const DecodeCase& c : kDecodeCases) {
    const auto ref = run_decode(c, "reference", Device::cpu(), DType::bf16);
    const auto got = run_decode(c, "cuda", Device::cuda(0), DType::bf16);
    EXPECT_LT(rel_err(got.first, ref.first), 1e-2) << "L=" << c.L;
    EXPECT_LT(rel_err(got.second, ref.second), 1e-2) << "L=" << c.L;
  }
}

// Varlen prefill on `backend`: (out, lse) on the host.
std::pair<std::vector<float>, std::vector<float>> run_prefill(const std::string& backend, Device device, DType dtype,
                                                              bool causal, int n, int dqk, int dv) {
  std::mt19937 rng(9);
  const std::vector<int32_t> cu_q = {0, 5, 6, 23};
  const std::vector<int32_t> cu_k = causal ? cu_q : std::vector<int32_t>{0, 7, 7, 19};  // an empty key sequence
  const int64_t tq = cu_q.back(), tk = cu_k.back();
  OwnedTensor q = random_host({tq, n, dqk}, dtype, rng), k = random_host({tk, n, dqk}, dtype, rng),
              v = random_host({tk, n, dv}, dtype, rng);
  OwnedTensor cq = OwnedTensor::empty({4}, DType::i32), ck = OwnedTensor::empty({4}, DType::i32);
  std::copy(cu_q.begin(), cu_q.end(), cq.data_as<int32_t>());
  std::copy(cu_k.begin(), cu_k.end(), ck.data_as<int32_t>());
  OwnedTensor out = OwnedTensor::empty({tq, n, dv}, dtype, device),
              lse = OwnedTensor::empty({n, tq}, DType::f32, device);
  fill(out, std::numeric_limits<float>::quiet_NaN());
  fill(lse, std::numeric_limits<float>::quiet_NaN());
  PrefillCallParams params;
  params.device = device;
  params.backend = backend;
  EXPECT_EQ(mla_prefill(on(q, device), on(k, device), on(v, device), cq, ck, causal, 0.1f, out, lse, params), backend);
  return {host_values(out), host_values(lse)};
}

TEST(FunctionalPrefill, CpuMatchesReference) {
  for (const bool causal : {true, false}) {
    for (const auto& [n, dqk, dv] : {std::tuple{4, 192, 128}, std::tuple{3, 96, 64}}) {
      const auto ref = run_prefill("reference", Device::cpu(), DType::f32, causal, n, dqk, dv);
      const auto got = run_prefill("cpu", Device::cpu(), DType::f32, causal, n, dqk, dv);
      EXPECT_LT(rel_err(got.first, ref.first), 1e-5) << "causal " << causal << " dqk " << dqk;
      EXPECT_LT(rel_err(got.second, ref.second), 1e-5) << "causal " << causal << " dqk " << dqk;
    }
  }
}

TEST(FunctionalPrefill, CudaMatchesReference) {
  LATTN_REQUIRE_GPU();
  for (const bool causal : {true, false}) {
    const auto ref = run_prefill("reference", Device::cpu(), DType::bf16, causal, 4, 192, 128);
    const auto got = run_prefill("cuda", Device::cuda(0), DType::bf16, causal, 4, 192, 128);
    EXPECT_LT(rel_err(got.first, ref.first), 1e-2) << "causal " << causal;
    EXPECT_LT(rel_err(got.second, ref.second), 1e-2) << "causal " << causal;
  }
}

TEST(FunctionalPrefill, RefusesCausalWithDifferentKeys) {
  OwnedTensor q = OwnedTensor::zeros({3, 1, 48}, DType::f32), k = OwnedTensor::zeros({4, 1, 48}, DType::f32),
              v = OwnedTensor::zeros({4, 1, 32}, DType::f32), out = OwnedTensor::zeros({3, 1, 32}, DType::f32);
  OwnedTensor cq = OwnedTensor::empty({2}, DType::i32), ck = OwnedTensor::empty({2}, DType::i32);
  cq.data_as<int32_t>()[0] = ck.data_as<int32_t>()[0] = 0;
  cq.data_as<int32_t>()[1] = 3;
  ck.data_as<int32_t>()[1] = 4;
  try {
    mla_prefill(q, k, v, cq, ck, true, 0.1f, out, {});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cu_seqlens_k"), std::string::npos) << e.what();
  }
}

TEST(SoftmaxScale, PresetsCarryTheirModelsYarnScale) {
  EXPECT_NEAR(MlaDims::deepseek_v3().softmax_scale(), 0.1352338, 1e-6);  // 192^-0.5 * (0.1 ln 40 + 1)^2
  EXPECT_NEAR(MlaDims::deepseek_v2(16).softmax_scale(), 0.1147214, 1e-6);
  EXPECT_NEAR(MlaDims::minicpm3().softmax_scale(), 1.0 / std::sqrt(96.0), 1e-7);
  EXPECT_NEAR(mla_softmax_scale(192, 40, 1.0), MlaDims::deepseek_v3().softmax_scale(), 1e-7);
  EXPECT_DOUBLE_EQ(yarn_mscale(1.0, 1.0), 1.0);
}

}  // namespace
}  // namespace lattn
