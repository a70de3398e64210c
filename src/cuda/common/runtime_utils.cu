// Streams, graphs and event timers (see runtime_utils.h).
#include "cuda/common/runtime_utils.h"

#include <cuda_runtime.h>

#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"

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

void device_synchronize(int device) {
  DeviceGuard guard(device);
  LATTN_CUDA_CHECK(cudaDeviceSynchronize());
}

void check_last_error(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(err, what, __FILE__, __LINE__);
}

}  // namespace lattn::cuda
