// Device names, parsing and the CUDA device query (clean on GPU-less machines).
#include <gtest/gtest.h>

#include "lattn/device.h"
#include "lattn/errors.h"
#include "lattn/log.h"
#include "lattn/version.h"

namespace lattn {
namespace {

TEST(Device, NamesAndParsing) {
  EXPECT_EQ(device_name(Device::cpu()), "cpu");
  EXPECT_EQ(device_name(Device::cuda(3)), "cuda:3");
  EXPECT_EQ(parse_device("cuda:2"), Device::cuda(2));
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_THROW(parse_device("gpu"), ValueError);
  EXPECT_THROW(parse_device("cuda:x"), ValueError);
}

TEST(Device, QueryNeverThrowsAndExplainsAbsence) {
  const CudaDeviceQuery q = query_cuda_devices();
  if (q.devices.empty()) {
    EXPECT_FALSE(q.unavailable_reason.empty());
    EXPECT_EQ(q.unavailable_reason.find('\n'), std::string::npos);  // one line
    EXPECT_FALSE(device_capability(0).has_value());
    if (!built_with_cuda()) {
      EXPECT_EQ(q.unavailable_reason, "lattn was built without CUDA");
    }
  } else {
    EXPECT_TRUE(q.unavailable_reason.empty());
    for (const auto& d : q.devices) {
      EXPECT_GT(d.sm_count, 0);
      EXPECT_GE(d.capability.major, 5);
      EXPECT_GT(d.total_memory_bytes, 0u);
    }
    EXPECT_EQ(device_capability(0), q.devices[0].capability);
  }
}

TEST(Version, ReportsBuildOptions) {
  EXPECT_STRNE(version(), "");
  EXPECT_NE(std::string(build_options()).find(built_with_cuda() ? "cuda=on" : "cuda=off"), std::string::npos);
}

TEST(Log, LevelsOnceAndSink) {
  std::string sink;
  set_log_sink(&sink);
  set_log_level(LogLevel::info);
  log_debug("hidden");
  log_info("shown");
  EXPECT_TRUE(info_once("once text"));
  EXPECT_FALSE(info_once("once text"));
  set_log_level(LogLevel::warning);
  set_log_sink(nullptr);
  EXPECT_EQ(sink, "INFO shown\nINFO once text\n");
  EXPECT_EQ(parse_log_level("DEBUG"), LogLevel::debug);
  EXPECT_THROW(parse_log_level("loud"), ValueError);
}

}  // namespace
}  // namespace lattn
