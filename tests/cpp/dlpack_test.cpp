// DLPack import/export: zero-copy, round trip, refusals.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "lattn/dlpack_interop.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

TEST(DLPack, RoundTripIsZeroCopyAndKeepsOwnerAlive) {
  auto data = std::make_shared<std::vector<uint16_t>>(2 * 3 * 4);
  Tensor t(data->data(), DType::bf16, {2, 3, 4});
  Tensor strided = t.transpose(1, 2).narrow(1, 1, 3);  // [2, 3, 3] strided view
  std::weak_ptr<void> weak = data;
  DLManagedTensor* m = to_dlpack(strided, data);
  data.reset();
  EXPECT_FALSE(weak.expired());  // the export keeps the memory alive
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLBfloat);
  EXPECT_EQ(m->dl_tensor.ndim, 3);
  Tensor back = from_dlpack(m->dl_tensor);
  EXPECT_EQ(back.data(), strided.data());
  EXPECT_EQ(back.shape_str(), strided.shape_str());
  for (int d = 0; d < 3; ++d) EXPECT_EQ(back.stride(d), strided.stride(d));
  EXPECT_EQ(back.dtype(), DType::bf16);
  m->deleter(m);
  EXPECT_TRUE(weak.expired());
}

TEST(DLPack, NullStridesMeanCompactAndByteOffsetApplies) {
  std::vector<float> buf(16);
  int64_t shape[2] = {3, 5};
  DLTensor t{};
  t.data = buf.data();
  t.device = {kDLCPU, 0};
  t.ndim = 2;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 4;
  Tensor v = from_dlpack(t);
  EXPECT_EQ(v.data(), buf.data() + 1);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.stride(0), 5);
}

TEST(DLPack, RefusesUnsupportedTypesAndDevices) {
  float x = 0;
  int64_t shape[1] = {1};
  DLTensor t{};
  t.data = &x;
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.shape = shape;
  t.dtype = {kDLFloat, 64, 1};
  EXPECT_THROW(from_dlpack(t), ValueError);
  t.dtype = {kDLFloat, 32, 1};
  t.device = {kDLVulkan, 0};
  EXPECT_THROW(from_dlpack(t), ValueError);
}

TEST(DLPack, Fp8TravelsAsUint8) {
  std::vector<uint8_t> buf(4);
  Tensor t(buf.data(), DType::fp8_e4m3, {4});
  DLManagedTensor* m = to_dlpack(t, nullptr);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLUInt);
  Tensor back = from_dlpack(m->dl_tensor).reinterpret(DType::fp8_e4m3);
  EXPECT_EQ(back.dtype(), DType::fp8_e4m3);
  m->deleter(m);
}

}  // namespace
}  // namespace lattn
