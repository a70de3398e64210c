// The `lattn` command. `lattn info` reports the build and the devices.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "lattn/lattn.h"

int main(int argc, char** argv) {
  CLI::App app{"lattn: Multi-head Latent Attention (MLA) for inference engines"};
  app.require_subcommand(1);
  CLI::App* info = app.add_subcommand("info", "Version, build options and devices");
  CLI11_PARSE(app, argc, argv);

  if (info->parsed()) {
    std::printf("lattn %s (%s)\n", lattn::version(), lattn::build_options());
    const lattn::CudaDeviceQuery q = lattn::query_cuda_devices();
    if (q.devices.empty()) std::printf("CUDA: %s\n", q.unavailable_reason.c_str());
    for (const auto& d : q.devices) {
      std::printf("cuda:%d %s sm_%d%d, %d SMs, %.1f GiB\n", d.index, d.name.c_str(), d.capability.major,
                  d.capability.minor, d.sm_count, double(d.total_memory_bytes) / (1 << 30));
    }
  }
  return 0;
}
