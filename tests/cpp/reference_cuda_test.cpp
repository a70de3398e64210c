// The `reference` backends on CUDA tensors (staged through host copies) and
// the forward's device data movements (k_pe broadcast, column copies, row
// zeroing, swap_blocks host<->device): each result must equal the host run
// bit for bit. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/ops/forward_ops.h"
#include "lattn/backend.h"
#include "lattn/device.h"
#include "lattn/metadata.h"
#include "lattn/ops.h"
#include "lattn/registry.h"
#include "support/test_data.h"

namespace lattn {
namespace {

bool have_gpu() { return built_with_cuda() && !query_cuda_devices().devices.empty(); }

OwnedTensor upload(const Tensor& host, Device device) {
  OwnedTensor t = OwnedTensor::empty(host.shape(), host.dtype(), device);
  copy_tensor(host, t.tensor());
  return t;
}

OwnedTensor download(const Tensor& dev) {
  OwnedTensor t = OwnedTensor::empty(dev.shape(), dev.dtype());
  copy_tensor(dev, t.tensor());
  return t;
}

void expect_same_bytes(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << what << " differs between host and CUDA runs";
}

const MlaDims kDims{3, 32, 16, 8, 24};

TEST(ReferenceOnCuda, PrefillBackendMatchesTheHostRun) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  MetadataBuilderConfig config;
  config.block_size = 4;
  config.context_chunk_workspace_size = 64;
  const std::vector<RequestSpec> requests{{5, 7, {0, 1, 2}}, {3, 0, {3}}};
  MlaMetadata md = MlaMetadataBuilder(config).build(requests);
  md.to_device(gpu);
  const PrefillMetadata& pm = *md.prefill;
  const int64_t T = pm.num_prefill_tokens, N = kDims.num_heads, Dqk = kDims.qk_head_dim(), V = kDims.v_head_dim;
  const int64_t K = pm.chunks.seq_tot[0];

  std::mt19937_64 rng(3);
  // q is a strided view (every other row of a wider buffer) to exercise span staging.
  OwnedTensor q_wide = OwnedTensor::empty({2 * T, N, Dqk}, DType::bf16);
  test::fill_normal(q_wide, rng);
  OwnedTensor k = OwnedTensor::empty({T, N, Dqk}, DType::bf16), v = OwnedTensor::empty({T, N, V}, DType::bf16);
  OwnedTensor kc = OwnedTensor::empty({K, N, Dqk}, DType::bf16), vc = OwnedTensor::empty({K, N, V}, DType::bf16);
  for (const Tensor& t : {k.tensor(), v.tensor(), kc.tensor(), vc.tensor()}) test::fill_normal(t, rng);
  const int64_t q_shape[] = {T, N, Dqk}, q_strides[] = {2 * N * Dqk, Dqk, 1};
  const Tensor q_host(q_wide.data(), DType::bf16, q_shape, q_strides);
  const OwnedTensor q_wide_dev = upload(q_wide, gpu);
  const Tensor q_dev(q_wide_dev.data(), DType::bf16, q_shape, q_strides, gpu);

  auto run = [&](Device device, const Tensor& q, const PrefillMetadata& view) {
    PrefillBackendParams params{
        int(N), 0.2f,        kDims.kv_lora_rank,  kDims.qk_nope_head_dim, kDims.qk_rope_head_dim,
        int(V), DType::bf16, {device, nullptr, 0}};
    auto backend = mla_prefill_backend_registry().get_class("reference")->create(params);
    backend->prepare_metadata(view);
    const OwnedTensor kd = upload(k, device), vd = upload(v, device), kcd = upload(kc, device),
                      vcd = upload(vc, device);
    OwnedTensor out = OwnedTensor::empty({T, N, V}, DType::bf16, device),
                lse = OwnedTensor::empty({N, T}, DType::f32, device);
    OwnedTensor cout = OwnedTensor::empty({T, N, V}, DType::bf16, device),
                clse = OwnedTensor::empty({N, T}, DType::f32, device);
    for (const Tensor& t : {out.tensor(), lse.tensor(), cout.tensor(), clse.tensor()}) test::poison(t);
    backend->run_prefill_new_tokens(q, kd, vd, true, out, lse);
    backend->run_prefill_context_chunk(0, q, kcd, vcd, cout, clse);
    std::vector<OwnedTensor> results;
    for (const Tensor& t : {out.tensor(), lse.tensor(), cout.tensor(), clse.tensor()}) results.push_back(download(t));
    return results;
  };
  const auto host = run(Device::cpu(), q_host, pm);
  const auto dev = run(gpu, q_dev, pm);
  const char* names[] = {"new-token out", "new-token lse", "chunk out", "chunk lse"};
  for (size_t i = 0; i < host.size(); ++i) expect_same_bytes(host[i], dev[i], names[i]);
}

TEST(ReferenceOnCuda, DecodeBackendMatchesTheHostRun) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  MetadataBuilderConfig config;
  config.block_size = 4;
  config.reorder_batch_threshold = 2;
  config.context_chunk_workspace_size = 64;
  const std::vector<RequestSpec> requests{{1, 6, {4, 1}}, {2, 9, {0, 5, 2}}};
  MlaMetadata md = MlaMetadataBuilder(config).build(requests);
  md.to_device(gpu);
  const DecodeMetadata& dm = *md.decode;
  const int64_t T = dm.num_decode_tokens, N = kDims.num_heads, L = kDims.kv_lora_rank, R = kDims.qk_rope_head_dim;

  std::mt19937_64 rng(4);
  OwnedLatentCache host_cache(6, 4, kDims, DType::fp8_e4m3, Device::cpu(), 0.05f);
  OwnedTensor latents = OwnedTensor::empty({24, L + R}, DType::f32);
  test::fill_normal(latents, rng);
  std::vector<int64_t> slots(24);
  for (int64_t i = 0; i < 24; ++i) slots[size_t(i)] = i;
  concat_and_cache_mla(latents.tensor().narrow(1, 0, L), latents.tensor().narrow(1, L, R), host_cache,
                       Tensor(slots.data(), DType::i64, {24}));
  OwnedLatentCache dev_cache(6, 4, kDims, DType::fp8_e4m3, gpu, 0.05f);
  copy_tensor(host_cache.cache().data, dev_cache.cache().data);

  OwnedTensor ql = OwnedTensor::empty({T, N, L}, DType::f16), pe = OwnedTensor::empty({T, N, R}, DType::f16);
  test::fill_normal(ql, rng, 0.2f);
  test::fill_normal(pe, rng);
  auto run = [&](Device device, const LatentCache& cache) {
    DecodeBackendParams params{int(N), 0.15f, int(L), int(R), DType::f16, DType::fp8_e4m3, {device, nullptr, 0}};
    auto backend = mla_decode_backend_registry().get_class("reference")->create(params);
    backend->prepare_metadata(dm);
    const OwnedTensor qd = upload(ql, device), ped = upload(pe, device);
    OwnedTensor out = OwnedTensor::empty({T, N, L}, DType::f16, device),
                lse = OwnedTensor::empty({N, T}, DType::f32, device);
    test::poison(out);
    test::poison(lse);
    backend->run(qd, ped, cache, dm, out, lse);
    return std::pair{download(out), download(lse)};
  };
  const auto host = run(Device::cpu(), host_cache);
  const auto dev = run(gpu, dev_cache);
  expect_same_bytes(host.first, dev.first, "decode out");
  expect_same_bytes(host.second, dev.second, "decode lse");
}

TEST(ForwardOpsOnCuda, BroadcastCopyColumnsZeroRowsMatchTheHost) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  std::mt19937_64 rng(5);
  const int64_t T = 7, N = 3, P = 5, R = 4, V = 6;
  // k_pe as a strided view: the last R columns of [T, 9] rows.
  OwnedTensor latent = OwnedTensor::empty({T, 9}, DType::bf16);
  test::fill_normal(latent, rng);
  OwnedTensor k_host = OwnedTensor::empty({T, N, P + R}, DType::bf16);
  test::fill_normal(k_host, rng);
  const OwnedTensor latent_dev = upload(latent, gpu), k_dev = upload(k_host, gpu);
  detail::broadcast_k_pe(latent.tensor().narrow(1, 9 - R, R), k_host, nullptr);
  detail::broadcast_k_pe(latent_dev.tensor().narrow(1, 9 - R, R), k_dev, nullptr);
  expect_same_bytes(k_host, download(k_dev), "broadcast_k_pe");

  // Leading columns of [T, N, P+R] into a [T, N*V]-row view with a row stride of N*V + 2.
  OwnedTensor dst_host = OwnedTensor::zeros({T, N * V + 2}, DType::bf16);
  const OwnedTensor dst_dev = upload(dst_host, gpu);
  auto view = [&](const Tensor& rows) {
    const int64_t shape[] = {T, N, V - 2}, strides[] = {N * V + 2, V, 1};
    return Tensor(rows.data(), rows.dtype(), shape, strides, rows.device());
  };
  detail::copy_leading_columns(k_host, view(dst_host), nullptr);
  detail::copy_leading_columns(k_dev, view(dst_dev), nullptr);
  expect_same_bytes(dst_host, download(dst_dev), "copy_leading_columns");

  detail::zero_rows(dst_host.tensor().narrow(0, 2, 3).narrow(1, 0, N * V), nullptr);
  detail::zero_rows(dst_dev.tensor().narrow(0, 2, 3).narrow(1, 0, N * V), nullptr);
  expect_same_bytes(dst_host, download(dst_dev), "zero_rows");
}

TEST(SwapBlocksOnCuda, HostToDeviceAndBack) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  OwnedLatentCache host(4, 2, kDims, DType::bf16), back(4, 2, kDims, DType::bf16);
  OwnedLatentCache dev(5, 2, kDims, DType::bf16, gpu);
  std::mt19937_64 rng(6);
  test::fill_normal(host.cache().data, rng);
  fill(back.cache().data, 0.f);
  fill(dev.cache().data, 0.f);
  std::vector<int64_t> to_dev{0, 4, 3, 1}, to_host{4, 2, 1, 3};
  swap_blocks(host, dev, Tensor(to_dev.data(), DType::i64, {2, 2}));
  swap_blocks(dev, back, Tensor(to_host.data(), DType::i64, {2, 2}));
  const size_t block = size_t(2 * kDims.cache_entry_dim() * 2);
  const auto* h = static_cast<const uint8_t*>(host.cache().data.data());
  const auto* b = static_cast<const uint8_t*>(back.cache().data.data());
  EXPECT_EQ(std::memcmp(b + 2 * block, h + 0 * block, block), 0);  // host 0 -> dev 4 -> back 2
  EXPECT_EQ(std::memcmp(b + 3 * block, h + 3 * block, block), 0);  // host 3 -> dev 1 -> back 3
}

}  // namespace
}  // namespace lattn
