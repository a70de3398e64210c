// The CUDA device runner of the benchmark harness (see device_runner.h):
// CUDA events around each timed step, and the device's ceilings measured in
// the same run — a device-to-device copy of 2 GiB (bytes read + written) for
// bandwidth and cuBLAS bf16 / f16 8192³ GEMMs on random data for the matrix
// rates (docs/bench-method.md). Uses lattn's public API plus the CUDA runtime and
// cuBLAS; built only with CUDA.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "harness/device_runner.h"
#include "lattn/errors.h"

namespace lattn::bench {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw RuntimeError(std::string("cuda runner: ") + what + ": " + cudaGetErrorString(err));
}
void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(std::string("cuda runner: ") + what + ": cuBLAS status " + std::to_string(int(st)));
}

// Device memory released at scope exit.
struct DeviceMemory {
  void* ptr = nullptr;
  explicit DeviceMemory(size_t bytes) { check(cudaMalloc(&ptr, bytes), "cudaMalloc"); }
  ~DeviceMemory() { cudaFree(ptr); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

class CudaRunner final : public DeviceRunner {
 public:
  explicit CudaRunner(int index) : index_(index) {
    check(cudaSetDevice(index), "cudaSetDevice");
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~CudaRunner() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }

  Device device() const override { return Device::cuda(index_); }
  void synchronize() override { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

  // Events on the legacy default stream, which the backends use unless given
  // another stream: they bracket exactly the device work of one step.
  double time_us(const std::function<void()>& work) override {
    check(cudaEventRecord(start_, nullptr), "cudaEventRecord");
    work();
    check(cudaEventRecord(stop_, nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return double(ms) * 1e3;
  }

  Ceilings measure_ceilings(const CeilingOptions& options) override {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, index_), "cudaGetDeviceProperties");
    Ceilings c;
    c.device = device_name(device());
    c.device_name = prop.name;
    const int trials = std::max(options.trials, 3);
    c.bandwidth_gbps = copy_bandwidth_gbps(trials);
    c.bf16_gflops = gemm_gflops(CUDA_R_16BF, trials);
    c.f16_gflops = gemm_gflops(CUDA_R_16F, trials);
    return c;
  }

 private:
  double copy_bandwidth_gbps(int trials) {
    const size_t bytes = size_t(2) << 30;  // 2 GiB: far past the L2
    DeviceMemory src(bytes), dst(bytes);
    check(cudaMemset(src.ptr, 0x5a, bytes), "cudaMemset");
    std::vector<double> us;
    for (int i = 0; i < trials + 1; ++i) {  // the first copy warms up
      const double t =
          time_us([&] { check(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice), "copy"); });
      if (i) us.push_back(t);
    }
    return 2.0 * double(bytes) / median(us) * 1e-3;  // bytes read + written, per µs -> GB/s
  }

  // C = A·B, 8192³, 16-bit inputs of random values (never zeros: they run faster).
  double gemm_gflops(cudaDataType type, int trials) {
    const int n = 8192;
    const size_t elems = size_t(n) * n;
    std::vector<uint16_t> host(elems);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (auto& h : host) {
      const float v = dist(rng);
      if (type == CUDA_R_16BF) {
        const __nv_bfloat16 b = __float2bfloat16(v);
        h = *reinterpret_cast<const uint16_t*>(&b);
      } else {
        const __half b = __float2half(v);
        h = *reinterpret_cast<const uint16_t*>(&b);
      }
    }
    DeviceMemory a(elems * 2), b(elems * 2), c(elems * 2);
    check(cudaMemcpy(a.ptr, host.data(), elems * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(b.ptr, host.data(), elems * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    cublasHandle_t handle = nullptr;
    check(cublasCreate(&handle), "cublasCreate");
    const float alpha = 1.f, beta = 0.f;
    std::vector<double> us;
    try {
      for (int i = 0; i < trials + 1; ++i) {
        const double t = time_us([&] {
          check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.ptr, type, n, b.ptr, type, n, &beta,
                             c.ptr, type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx");
        });
        if (i) us.push_back(t);
      }
    } catch (...) {
      cublasDestroy(handle);
      throw;
    }
    cublasDestroy(handle);
    return 2.0 * double(n) * n * n / median(us) * 1e-3;  // FLOP per µs -> GFLOP/s
  }

  int index_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceRunner> make_cuda_runner(int index) { return std::make_unique<CudaRunner>(index); }

}  // namespace lattn::bench
