// Tensor views, owning buffers, host copies and argument checks.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "lattn/check.h"
#include "lattn/errors.h"
#include "lattn/tensor.h"

namespace lattn {
namespace {

std::vector<float> iota(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.f);
  return v;
}

float at(const Tensor& t, std::initializer_list<int64_t> idx) { return *static_cast<float*>(t.ptr_at(idx)); }

TEST(Tensor, ContiguousStridesAndNumel) {
  auto data = iota(24);
  Tensor t(data.data(), DType::f32, {2, 3, 4});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_FALSE(Tensor().defined());
}

TEST(Tensor, NarrowSelectTransposeView) {
  auto data = iota(24);
  Tensor t(data.data(), DType::f32, {2, 3, 4});
  Tensor n = t.narrow(2, 1, 2);  // [2, 3, 2]
  EXPECT_EQ(n.shape_str(), "[2, 3, 2]");
  EXPECT_FALSE(n.is_contiguous());
  EXPECT_TRUE(n.is_last_dim_contiguous());
  EXPECT_EQ(at(n, {1, 2, 1}), 1 * 12 + 2 * 4 + 2);
  Tensor s = t.select(1, 2);  // [2, 4]
  EXPECT_EQ(at(s, {1, 3}), 12 + 8 + 3);
  Tensor tr = t.transpose(0, 2);  // [4, 3, 2]
  EXPECT_EQ(at(tr, {3, 1, 1}), 12 + 4 + 3);
  Tensor v = t.view({6, -1});
  EXPECT_EQ(v.shape_str(), "[6, 4]");
  EXPECT_EQ(at(v, {5, 3}), 23);
  Tensor u = t.unsqueeze(1);
  EXPECT_EQ(u.shape_str(), "[2, 1, 3, 4]");
  EXPECT_EQ(at(u, {1, 0, 2, 3}), 23);
}

TEST(Tensor, EmptyTensorsAreContiguousWhateverTheirStrides) {
  float x = 0;
  const int64_t shape[3] = {0, 3, 48}, zero_strides[3] = {0, 0, 0};
  Tensor empty(&x, DType::f32, std::span<const int64_t>(shape), std::span<const int64_t>(zero_strides));
  EXPECT_TRUE(empty.is_contiguous());
  EXPECT_TRUE(empty.is_last_dim_contiguous());
  const int64_t one_row[3] = {1, 3, 48};
  Tensor broadcast(&x, DType::f32, std::span<const int64_t>(one_row), std::span<const int64_t>(zero_strides));
  EXPECT_FALSE(broadcast.is_contiguous());  // a real zero-stride view stays non-contiguous
  EXPECT_FALSE(broadcast.is_last_dim_contiguous());
}

TEST(Tensor, CheckedBounds) {
  auto data = iota(24);
  Tensor t(data.data(), DType::f32, {2, 3, 4});
  EXPECT_THROW(t.narrow(1, 2, 2), ValueError);
  EXPECT_THROW(t.select(0, 2), ValueError);
  EXPECT_THROW(t.size(3), ValueError);
  EXPECT_THROW(t.view({5, 5}), ValueError);
  EXPECT_THROW(t.narrow(2, 0, 2).view({-1}), ValueError);  // not contiguous
  EXPECT_THROW(t.ptr_at({0, 3}), ValueError);
  EXPECT_THROW(t.reinterpret(DType::f16), ValueError);
  const int64_t seven[7] = {1, 1, 1, 1, 1, 1, 1};
  EXPECT_THROW(Tensor(data.data(), DType::f32, std::span<const int64_t>(seven)), ValueError);
}

TEST(Tensor, CopyHostConvertsAndHandlesStrides) {
  auto data = iota(24);
  Tensor t(data.data(), DType::f32, {2, 3, 4});
  OwnedTensor dst = OwnedTensor::empty({4, 3, 2}, DType::bf16);
  copy_host(t.transpose(0, 2), dst.tensor());
  const uint16_t* p = dst.data_as<uint16_t>();
  EXPECT_EQ(bf16_to_f32(p[(3 * 3 + 1) * 2 + 1]), 12 + 4 + 3);
  EXPECT_THROW(copy_host(t, dst.tensor()), ValueError);  // shape mismatch
}

TEST(Tensor, OwnedTensorIsAlignedAndFillable) {
  OwnedTensor t = OwnedTensor::zeros({3, 5}, DType::f16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t.data_as<uint16_t>()[i], 0);
  fill(t.tensor(), 1.5f);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(f16_to_f32(t.data_as<uint16_t>()[i]), 1.5f);
  Buffer moved = Buffer(128, Device::cpu());
  Buffer other = std::move(moved);
  EXPECT_EQ(moved.data(), nullptr);
  EXPECT_NE(other.data(), nullptr);
}

TEST(Check, MessagesNameArgumentExpectedAndGot) {
  auto data = iota(24);
  Tensor t(data.data(), DType::f32, {2, 3, 4});
  try {
    check_shape("forward", "q", t, {2, kAnySize, 5});
    FAIL() << "no throw";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "forward: argument 'q' must have shape [2, *, 5], got [2, 3, 4]");
  }
  try {
    check_dtype("gather_cache", "dst", t, DType::bf16);
    FAIL() << "no throw";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "gather_cache: argument 'dst' must have dtype bf16, got f32");
  }
  try {
    check_device("op", "x", t, Device::cuda(1));
    FAIL() << "no throw";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "op: argument 'x' must be on cuda:1, got cpu");
  }
  EXPECT_THROW(check_contiguous("op", "x", t.narrow(2, 0, 2)), ValueError);
  EXPECT_NO_THROW(check_last_dim_contiguous("op", "x", t.narrow(2, 0, 2)));
  EXPECT_THROW(check_defined("op", "x", Tensor()), ValueError);
  EXPECT_THROW(check_dtype_in("op", "x", t, {DType::f16, DType::bf16}), ValueError);
  EXPECT_NO_THROW(check_shape("op", "x", t, {2, 3, 4}));
}

}  // namespace
}  // namespace lattn
