// Per-(thread, device) contexts: device properties and cuBLAS handles.
#include "cuda/common/context.h"

#include <map>
#include <memory>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"

namespace lattn::cuda {
namespace {

// Owns one thread's contexts; released when the thread exits.
struct ThreadContexts {
  std::map<int, std::unique_ptr<DeviceContext>> by_device;
  ~ThreadContexts() {
    for (auto& [device, ctx] : by_device) {
      DeviceGuard guard(device, std::nothrow);
      if (!guard.ok()) continue;  // driver already shut down
      if (ctx->cublas) cublasDestroy(ctx->cublas);
      if (ctx->cublas_lt) cublasLtDestroy(ctx->cublas_lt);
      if (ctx->cublas_workspace) cudaFree(ctx->cublas_workspace);
    }
  }
};

}  // namespace

void check_cublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw RuntimeError(std::string("cuBLAS error in ") + what + ": " + cublasGetStatusName(status) + " (" +
                     cublasGetStatusString(status) + ")");
}

DeviceContext& device_context(int device) {
  thread_local ThreadContexts contexts;
  auto it = contexts.by_device.find(device);
  if (it != contexts.by_device.end()) return *it->second;

  DeviceGuard guard(device);
  auto ctx = std::make_unique<DeviceContext>();
  ctx->device = device;
  cudaDeviceProp prop{};
  LATTN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  ctx->sm_count = prop.multiProcessorCount;
  ctx->max_smem_per_block_optin = int(prop.sharedMemPerBlockOptin);
  ctx->max_smem_per_sm = int(prop.sharedMemPerMultiprocessor);
  ctx->capability_major = prop.major;
  ctx->capability_minor = prop.minor;
  int memory_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess) {
    ctx->dram_peak_gbps = 2.0 * double(memory_khz) * 1e3 * double(bus_bits / 8) / 1e9;
  }
  (void)cudaGetLastError();  // an unsupported attribute leaves nothing pending
  check_cublas(cublasCreate(&ctx->cublas), "cublasCreate");
  check_cublas(cublasLtCreate(&ctx->cublas_lt), "cublasLtCreate");
  LATTN_CUDA_CHECK(cudaMalloc(&ctx->cublas_workspace, DeviceContext::kCublasWorkspaceBytes));
  check_cublas(cublasSetWorkspace(ctx->cublas, ctx->cublas_workspace, DeviceContext::kCublasWorkspaceBytes),
               "cublasSetWorkspace");
  // Pointer mode host: alpha/beta are read from host memory at launch time,
  // which graph capture records by value.
  check_cublas(cublasSetPointerMode(ctx->cublas, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
  DeviceContext& ref = *ctx;
  contexts.by_device.emplace(device, std::move(ctx));
  return ref;
}

cublasHandle_t cublas_handle(int device, Stream stream) {
  DeviceContext& ctx = device_context(device);
  check_cublas(cublasSetStream(ctx.cublas, reinterpret_cast<cudaStream_t>(stream)), "cublasSetStream");
  return ctx.cublas;
}

}  // namespace lattn::cuda
