// src/cuda/common/runtime_utils.h — streams, CUDA graphs and event timers for
// lattn's own tests, benchmarks and tools, without including CUDA headers
// (callers need no CUDA include path; every call is checked and throws
// RuntimeError naming the operation).
#pragma once

#include <cstdint>
#include <memory>

#include "lattn/dtype.h"
#include "lattn/stream.h"

namespace lattn::cuda {

// A non-blocking stream on `device` (graph capture needs a real stream).
class StreamHandle {
 public:
  explicit StreamHandle(int device = 0);
  ~StreamHandle();
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
  Stream get() const { return stream_; }
  void synchronize() const;

 private:
  // [[maybe_unused]]: a build without CUDA implements these classes as stubs.
  [[maybe_unused]] Stream stream_ = nullptr;
  [[maybe_unused]] int device_ = 0;
};

// Captures the work issued on a stream between begin() and end() into an
// executable graph; replay() launches it again (new data in the same buffers).
class CapturedGraph {
 public:
  CapturedGraph() = default;
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void begin(Stream stream);  // global capture mode: unsafe calls (cudaMalloc, sync) fail loudly
  void end();
  void replay(Stream stream) const;
  bool ready() const { return exec_ != nullptr; }
  // Kernel nodes of the captured graph (tests check what was captured).
  int num_kernel_nodes() const { return kernel_nodes_; }

 private:
  [[maybe_unused]] Stream stream_ = nullptr;
  [[maybe_unused]] void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  int kernel_nodes_ = 0;
};

// Times device work with CUDA events: start() / stop() on a stream, then
// elapsed_ms() waits for the stop event.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(Stream stream);
  void stop(Stream stream);
  float elapsed_ms() const;

 private:
  [[maybe_unused]] void* start_ = nullptr;  // cudaEvent_t
  [[maybe_unused]] void* stop_ = nullptr;
};

// Fills n elements of a device buffer of floating `dtype` with uniform values
// in [-scale, scale) from a counter-based hash of (seed, index): large
// benchmark inputs without a host round trip (never zeros: they run faster).
void fill_random_device(void* data, DType dtype, int64_t n, uint64_t seed, float scale, Stream stream);

void device_synchronize(int device);
// The last asynchronous error of the calling thread's device, as RuntimeError.
void check_last_error(const char* what);

}  // namespace lattn::cuda
