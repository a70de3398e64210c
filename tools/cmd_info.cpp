// `lattn info`: the build, this machine (CPU features and threads, CUDA
// devices), and for one model configuration every prefill and decode backend
// with "valid" or its reasons.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "backend_report.h"
#include "commands.h"
#include "cpu_info.h"
#include "exit_codes.h"
#include "lattn/cpu.h"
#include "lattn/device.h"
#include "lattn/kernel_label.h"
#include "lattn/version.h"
#include "layer_options.h"
#include "provenance.h"
#include "serving/text.h"

namespace lattn::cli {
namespace {

using serving::join;

struct InfoOptions {
  LayerFlags layer;
  bool json = false;
};

double gib(uint64_t bytes) { return double(bytes) / double(1ull << 30); }

nlohmann::ordered_json dims_json(const MlaDims& d) {
  return {{"num_heads", d.num_heads},
          {"kv_lora_rank", d.kv_lora_rank},
          {"qk_nope_head_dim", d.qk_nope_head_dim},
          {"qk_rope_head_dim", d.qk_rope_head_dim},
          {"v_head_dim", d.v_head_dim},
          {"softmax_scale", d.softmax_scale()}};
}

nlohmann::ordered_json listing_json(const BackendListing& listing) {
  nlohmann::ordered_json backends = nlohmann::ordered_json::array();
  for (const BackendVerdict& v : listing.verdicts) {
    nlohmann::ordered_json b = {{"name", v.name}, {"valid", v.valid()}, {"reasons", v.reasons}, {"path", v.path}};
    if (!v.error.empty()) b["error"] = v.error;
    backends.push_back(b);
  }
  nlohmann::ordered_json j = {{"priority", listing.priority}};
  j["selected"] = listing.selected.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(listing.selected);
  if (!listing.selection_error.empty()) j["selection_error"] = listing.selection_error;
  j["backends"] = backends;
  return j;
}

void print_listing(const BackendListing& listing) {
  std::printf("%s backends (automatic order on this device: %s)\n", backend_kind_name(listing.kind),
              join(listing.priority, ", ").c_str());
  for (const BackendVerdict& v : listing.verdicts) {
    const bool selected = v.name == listing.selected;
    std::printf("  %-10s %s%s\n", v.name.c_str(), v.valid() ? "valid" : join(v.reasons, "; ").c_str(),
                selected ? "  <- selected" : "");
  }
  if (listing.selected.empty()) {
    std::printf("  no backend can serve this configuration: %s\n", listing.selection_error.c_str());
  }
}

nlohmann::ordered_json info_json(const LayerSetup& setup, const CpuInfo& cpu, const CudaDeviceQuery& cuda) {
  nlohmann::ordered_json j;
  j["lattn"] = {{"version", version()}, {"build_options", build_options()}, {"cuda_built", built_with_cuda()}};
  j["cpu"] = {{"model", cpu.model},
              {"features", cpu.features},
              {"hardware_threads", cpu.hardware_threads},
              {"openmp_max_threads", cpu.openmp_max_threads},
              {"isa", cpu_isa_name(cpu_isa())},
              {"cpu_backend_kernels", cpu_kernel_label(setup.dtype)}};
  nlohmann::ordered_json devices = nlohmann::ordered_json::array();
  for (const CudaDeviceInfo& d : cuda.devices) {
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"capability", std::to_string(d.capability.major) + "." + std::to_string(d.capability.minor)},
                       {"sm_count", d.sm_count},
                       {"total_memory_bytes", d.total_memory_bytes},
                       {"l2_cache_bytes", d.l2_cache_bytes}});
  }
  j["cuda"] = {{"devices", devices}, {"unavailable_reason", cuda.unavailable_reason}};
  j["config"] = {{"model", setup.model},
                 {"tp", setup.tp},
                 {"dims", dims_json(setup.dims)},
                 {"dtype", dtype_flag_name(setup.dtype)},
                 {"kv_cache_dtype", dtype_flag_name(setup.kv_cache_dtype)},
                 {"block_size", setup.block_size},
                 {"device", device_name(setup.device)}};
  j["backends"] = nlohmann::ordered_json::object();
  for (const BackendKind kind : {BackendKind::prefill, BackendKind::decode}) {
    const BackendListing listing = list_backends(kind, setup);
    nlohmann::ordered_json b = listing_json(listing);
    // What the selected backend runs, in words (null when none is selected).
    const std::string kernel = selected_kernel_label(kind, listing.selected, setup);
    b["kernel"] = kernel.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(kernel);
    j["backends"][kind == BackendKind::prefill ? "prefill" : "decode"] = b;
  }
  return j;
}

void print_info(const LayerSetup& setup, const CpuInfo& cpu, const CudaDeviceQuery& cuda) {
  std::printf("lattn %s\n", version());
  std::printf("build     %s\n", build_options());
  std::printf("cpu       %s\n", cpu.model.c_str());
  std::printf("          features: %s\n", cpu.features.empty() ? "(none detected)" : join(cpu.features, " ").c_str());
  std::printf("          threads: %d hardware, %d OpenMP\n", cpu.hardware_threads, cpu.openmp_max_threads);
  std::printf("          cpu backend: %s\n", cpu_kernel_label(setup.dtype).c_str());
  if (cuda.devices.empty()) std::printf("cuda      none: %s\n", cuda.unavailable_reason.c_str());
  for (const CudaDeviceInfo& d : cuda.devices) {
    std::printf("cuda:%-5d %s, compute capability %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", d.index, d.name.c_str(),
                d.capability.major, d.capability.minor, d.sm_count, gib(d.total_memory_bytes),
                double(d.l2_cache_bytes) / double(1 << 20));
  }
  std::printf("config    %s --tp %d: %s scale %.4g, dtype %s, kv cache %s, block size %d, device %s\n",
              setup.model.c_str(), setup.tp, setup.dims.str().c_str(), double(setup.dims.softmax_scale()),
              dtype_flag_name(setup.dtype), dtype_flag_name(setup.kv_cache_dtype), setup.block_size,
              device_name(setup.device).c_str());
  for (const BackendKind kind : {BackendKind::prefill, BackendKind::decode}) {
    const BackendListing listing = list_backends(kind, setup);
    print_listing(listing);
    const std::string kernel = selected_kernel_label(kind, listing.selected, setup);
    if (!kernel.empty()) std::printf("  kernels: %s\n", kernel.c_str());
  }
}

}  // namespace

Subcommand add_info_command(CLI::App& root) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* app = root.add_subcommand(
      "info",
      "Version and build options, CPU features and threads, CUDA devices, and which prefill and decode "
      "backends can serve the chosen model configuration (and why the others cannot)");
  add_layer_flags(*app, options->layer);
  app->add_flag("--json", options->json, "Print one JSON object instead of text");
  app->footer(exit_codes_help());

  return {app, [options]() {
            LayerSetup setup = resolve_layer_setup(options->layer);
            const ResolvedBackends names = resolve_backend_names(setup);
            setup.prefill_backend = names.prefill;
            setup.decode_backend = names.decode;
            const CpuInfo cpu = query_cpu_info();
            const CudaDeviceQuery cuda = query_cuda_devices();
            if (options->json) {
              std::printf("%s\n", with_provenance(info_json(setup, cpu, cuda)).dump(2).c_str());
            } else {
              print_info(setup, cpu, cuda);
            }
            return int(kExitOk);
          }};
}

}  // namespace lattn::cli
