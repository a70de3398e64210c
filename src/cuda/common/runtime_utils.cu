// Streams, graphs and event timers (see runtime_utils.h).
#include "cuda/common/runtime_utils.h"

#include <cuda_runtime.h>

#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dtype_device.cuh"

namespace lattn::cuda {

StreamHandle::StreamHandle(int device) : device_(device) {
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  LATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}

StreamHandle::~StreamHandle() {
  if (stream_) cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream_));
}

void StreamHandle::synchronize() const {
  LATTN_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream_)));
}

CapturedGraph::~CapturedGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void CapturedGraph::begin(Stream stream) {
  stream_ = stream;
  LATTN_CUDA_CHECK(cudaStreamBeginCapture(reinterpret_cast<cudaStream_t>(stream), cudaStreamCaptureModeGlobal));
}

void CapturedGraph::end() {
  cudaGraph_t graph = nullptr;
  LATTN_CUDA_CHECK(cudaStreamEndCapture(reinterpret_cast<cudaStream_t>(stream_), &graph));
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  LATTN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  exec_ = exec;
  size_t n = 0;
  LATTN_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  LATTN_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  kernel_nodes_ = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    LATTN_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel) ++kernel_nodes_;
  }
}

void CapturedGraph::replay(Stream stream) const {
  LATTN_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), reinterpret_cast<cudaStream_t>(stream)));
}

EventTimer::EventTimer() {
  cudaEvent_t a = nullptr, b = nullptr;
  LATTN_CUDA_CHECK(cudaEventCreate(&a));
  LATTN_CUDA_CHECK(cudaEventCreate(&b));
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void EventTimer::start(Stream stream) {
  LATTN_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_), reinterpret_cast<cudaStream_t>(stream)));
}

void EventTimer::stop(Stream stream) {
  LATTN_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(stop_), reinterpret_cast<cudaStream_t>(stream)));
}

float EventTimer::elapsed_ms() const {
  LATTN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
  float ms = 0.f;
  LATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)));
  return ms;
}

namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fill_random_kernel(void* data, DType dtype, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = float(mix64(seed * 0x100000001b3ull + uint64_t(i)) >> 40) * (1.f / 16777216.f);  // [0, 1)
    store_f32(data, dtype, i, (2.f * u - 1.f) * scale);
  }
}

}  // namespace

void fill_random_device(void* data, DType dtype, int64_t n, uint64_t seed, float scale, Stream stream) {
  if (n == 0) return;
  fill_random_kernel<<<4096, 256, 0, reinterpret_cast<cudaStream_t>(stream)>>>(data, dtype, n, seed, scale);
  LATTN_CUDA_CHECK_LAUNCH("fill_random_kernel");
}

void device_synchronize(int device) {
  DeviceGuard guard(device);
  LATTN_CUDA_CHECK(cudaDeviceSynchronize());
}

void check_last_error(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(err, what, __FILE__, __LINE__);
}

}  // namespace lattn::cuda
