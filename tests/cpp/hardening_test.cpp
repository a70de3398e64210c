// Hostile sizes and shared state at the public C++ boundary: size products
// that would wrap are refused (ValueError) before anything is allocated, an
// allocation that fails is an OutOfMemoryError (Python MemoryError), DLPack imports of impossible
// tensors are refused, weight views survive a reload, and the metadata
// workspace arithmetic is overflow-checked (docs/reliability.md).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <dlpack/dlpack.h>

#include "lattn/attention.h"
#include "lattn/cache.h"
#include "lattn/dlpack_interop.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "lattn/overflow.h"
#include "lattn/tensor.h"
#include "support/backend_driver.h"

namespace lattn {
namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

template <class Fn>
std::string value_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no ValueError)";
}

TEST(Overflow, CheckedArithmeticRefusesWrapping) {
  EXPECT_EQ(checked_mul(3, 4, "x"), 12);
  EXPECT_EQ(checked_add(kI64Max - 1, 1, "x"), kI64Max);
  EXPECT_NE(value_error_of([] { checked_mul(int64_t(1) << 62, 4, "blocks"); }).find("blocks: "), std::string::npos);
  EXPECT_THROW(checked_add(kI64Max, 1, "x"), ValueError);
  EXPECT_THROW(checked_mul(-(int64_t(1) << 62), 4, "x"), ValueError);
}

TEST(Overflow, TensorShapesWhoseSizeWrapsAreRefused) {
  const int64_t huge = int64_t(1) << 62;
  // numel fits, bytes do not (f32): was accepted with a wrapped nbytes().
  EXPECT_NE(value_error_of([&] {
              Tensor(nullptr, DType::f32, {huge, 576});
            }).find("does not fit in 64 bits"),
            std::string::npos);
  EXPECT_THROW(Tensor(nullptr, DType::u8, {int64_t(1) << 32, int64_t(1) << 32}), ValueError);
  // A zero dim does not hide an overflowing product of the others (strides would wrap).
  EXPECT_THROW(Tensor(nullptr, DType::f32, {0, huge, huge}), ValueError);
  // Strided views whose farthest element is past 2^63 bytes.
  const std::vector<int64_t> shape{2, 2}, strides{kI64Max / 2, 1};
  EXPECT_THROW(Tensor(nullptr, DType::f32, shape, strides), ValueError);
  // Found by fuzz_dlpack_import: a farthest element at exactly 2^63 - 1 elements (its + 1 overflowed).
  const std::vector<int64_t> edge_shape{2}, edge_strides{kI64Max};
  EXPECT_THROW(Tensor(nullptr, DType::u8, edge_shape, edge_strides), ValueError);
  // The largest sane shapes still work.
  EXPECT_NO_THROW(Tensor(nullptr, DType::u8, {int64_t(1) << 40, 1024}));
}

TEST(Overflow, OwnedTensorAndCacheRefuseWrappedSizesBeforeAllocating) {
  EXPECT_THROW(OwnedTensor::empty({int64_t(1) << 62, 576}, DType::f32), ValueError);
  EXPECT_THROW(OwnedLatentCache(int64_t(1) << 62, 1024, MlaDims{1, 512, 1, 64, 1}, DType::bf16, Device::cpu(), 1.f),
               ValueError);
}

TEST(Overflow, FailedAllocationIsMemoryError) {
  // 2^60 bytes: representable, never available.
  EXPECT_THROW(OwnedTensor::empty({int64_t(1) << 58}, DType::f32), OutOfMemoryError);
  EXPECT_THROW(Buffer(std::numeric_limits<size_t>::max() - 8, Device::cpu()), OutOfMemoryError);
  // An OutOfMemoryError is a RuntimeError (callers that catch running failures catch it).
  EXPECT_THROW(OwnedTensor::empty({int64_t(1) << 58}, DType::f32), RuntimeError);
}

TEST(Overflow, NarrowAndViewDoNotWrap) {
  std::vector<float> data(8);
  const Tensor t(data.data(), DType::f32, {8});
  EXPECT_THROW(t.narrow(0, 4, kI64Max), ValueError);  // start + length wrapped past the size check
  EXPECT_THROW(t.view({int64_t(1) << 62, int64_t(1) << 62, 0}), ValueError);
}

TEST(Overflow, WorkspaceSizeArithmeticIsChecked) {
  EXPECT_NE(
      value_error_of([] { mla_context_chunk_workspace_size(int64_t(1) << 61, 4, 16); }).find("does not fit in 64 bits"),
      std::string::npos);
  EXPECT_THROW(mla_context_chunk_workspace_size(1024, int64_t(1) << 40, int64_t(1) << 40), ValueError);
}

// Found by fuzz_metadata_builder: a profile run (block tables unchecked) with
// a 2^31-token decode context and a 1-row workspace planned 2^31 context
// chunks, a 17 GB host allocation. The plan size is now bounded.
TEST(MetadataBuilderLimits, AbsurdChunkPlansAreRefusedNotAllocated) {
  MetadataBuilderConfig config;
  config.block_size = 1;
  config.context_chunk_workspace_size = 1;
  const MlaMetadataBuilder builder(config);
  const std::vector<RequestSpec> requests = {{1, std::numeric_limits<int32_t>::max() - 10, {}}, {2, 1, {}}};
  BuildOptions options;
  options.is_profile_run = true;
  EXPECT_NE(value_error_of([&] { builder.build(requests, options); }).find("raise context_chunk_workspace_size"),
            std::string::npos);
  // Found by fuzz_metadata_builder: a workspace near 2^63 overflowed the chunk count's rounding.
  MetadataBuilderConfig huge = config;
  huge.block_size = 16;
  huge.context_chunk_workspace_size = kI64Max - 8;
  const std::vector<RequestSpec> small = {{4, 20, {0, 1}}};
  EXPECT_NO_THROW(MlaMetadataBuilder(huge).build(small));
}

// Found by fuzz_dlpack_import: a device type code the enum does not list
// (read as the enum: undefined behaviour) and negative CUDA ids.
TEST(DlpackImport, UnknownDeviceCodesAreRefused) {
  char storage[16];
  int64_t shape[1] = {4};
  DLTensor t{};
  t.data = storage;
  t.dtype = {kDLFloat, 32, 1};
  t.ndim = 1;
  t.shape = shape;
  const int32_t unknown = 1000;
  std::memcpy(&t.device.device_type, &unknown, sizeof unknown);
  EXPECT_THROW(from_dlpack(t), ValueError);
  t.device = {kDLCUDA, -3};
  EXPECT_THROW(from_dlpack(t), ValueError);
  t.device = {kDLCPU, 0};
  EXPECT_EQ(from_dlpack(t).numel(), 4);
}

TEST(DlpackImport, ImpossibleTensorsAreRefused) {
  char storage[16];
  int64_t shape[2] = {int64_t(1) << 62, 64};
  DLTensor t{};
  t.data = storage;
  t.device = {kDLCPU, 0};
  t.dtype = {kDLFloat, 32, 1};
  t.ndim = -1;  // was: std::vector of (size_t)-1 elements (length_error / crash)
  t.shape = shape;
  EXPECT_THROW(from_dlpack(t), ValueError);
  t.ndim = 2;
  EXPECT_THROW(from_dlpack(t), ValueError);  // bytes past 2^63
  t.shape = nullptr;
  EXPECT_THROW(from_dlpack(t), ValueError);  // no shape array
  // Found by fuzz_dlpack_import: data + byte_offset overflowed the pointer.
  int64_t small[1] = {4};
  t.ndim = 1;
  t.shape = small;
  t.byte_offset = std::numeric_limits<uint64_t>::max() - 8;
  EXPECT_THROW(from_dlpack(t), ValueError);
}

TEST(WeightViews, KeepTheirStorageAcrossReloads) {
  MlaAttentionConfig config;
  config.dims = {2, 2, 1, 1, 1};
  config.dtype = DType::f32;
  MlaAttention attention(config);
  std::vector<float> w{1, 2, 3, 4, 5, 6, 7, 8};
  attention.process_weights_after_loading(Tensor(w.data(), DType::f32, {4, 2}));
  const Tensor old_view = attention.W_UK_T();
  const std::shared_ptr<const void> owner = attention.weights_owner();
  std::vector<float> w2{10, 20, 30, 40, 50, 60, 70, 80};
  attention.process_weights_after_loading(Tensor(w2.data(), DType::f32, {4, 2}));
  // New storage for the new weights; the old view reads the old values (ASan: no use after free).
  EXPECT_NE(attention.W_UK_T().data(), old_view.data());
  const float* k = old_view.data_as<float>();
  EXPECT_EQ(std::vector<float>(k, k + 4), (std::vector<float>{1, 2, 5, 6}));
  EXPECT_EQ(attention.W_UK_T().data_as<float>()[0], 10.f);
}

// One layer, two threads: every forward either computes its thread's result
// exactly or is refused with RuntimeError (the contract of lattn/attention.h);
// none returns an output computed with the other thread's scratch.
TEST(LayerThreads, AConcurrentCallIsRefusedNeverMixed) {
  test::BackendCase c;
  c.name = "threads";
  c.dims = MlaDims{3, 64, 32, 16, 24};
  c.dtype = DType::f32;
  c.kv_cache_dtype = DType::f16;
  c.decodes = {{50, 1}, {30, 1}};
  c.prefills = {{40, 120}, {0, 100}};
  test::PreparedStep step(c, "cpu", "cpu");
  const Tensor q = step.q();
  const int64_t T = q.size(0), width = int64_t(c.dims.num_heads) * c.dims.v_head_dim;
  // Thread 1 uses a different query (q * 2): shared scratch would mix the two.
  OwnedTensor q2 = OwnedTensor::empty(q.shape(), q.dtype());
  copy_host(q, q2.tensor());
  for (int64_t i = 0; i < q2.tensor().numel(); ++i) q2.data_as<float>()[i] *= 2.f;
  const Tensor queries[2] = {q, q2.tensor()};
  OwnedTensor expected[2] = {OwnedTensor::empty({T, width}, DType::f32), OwnedTensor::empty({T, width}, DType::f32)};
  for (int i = 0; i < 2; ++i) {
    step.attention().forward(queries[i], step.kv_c(), step.k_pe(), step.cache(), step.metadata(), expected[i].tensor());
  }
  std::atomic<int> wrong{0}, refused{0}, ok{0};
  auto worker = [&](int i) {
    OwnedTensor out = OwnedTensor::empty({T, width}, DType::f32);
    for (int iter = 0; iter < 20; ++iter) {
      try {
        step.attention().forward(queries[i], step.kv_c(), step.k_pe(), step.cache(), step.metadata(), out.tensor());
      } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find("another thread"), std::string::npos) << e.what();
        ++refused;
        continue;
      }
      // A tolerance, not bit equality: the two threads' OpenMP teams may differ in size.
      bool same = true;
      for (int64_t k = 0; k < out.tensor().numel() && same; ++k) {
        const float x = out.data_as<float>()[k], y = expected[i].data_as<float>()[k];
        same = std::fabs(x - y) <= 1e-5f * (1.f + std::fabs(y));
      }
      ++(same ? ok : wrong);
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0) << ok.load() << " right, " << refused.load() << " refused";
  EXPECT_GT(ok.load(), 0);
}

}  // namespace
}  // namespace lattn
