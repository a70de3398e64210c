// Streams for dcp_device_test (one per rank thread): the test's only CUDA
// runtime calls, kept here so the test itself stays plain C++.
#include <cuda_runtime.h>

#include "lattn/stream.h"

namespace lattn::test {

// A non-blocking stream on `device` (also made the calling thread's current device).
Stream create_stream(int device) {
  if (cudaSetDevice(device) != cudaSuccess) return nullptr;
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return nullptr;
  return s;
}

void destroy_stream(Stream s) {
  if (s) cudaStreamDestroy(s);
}

}  // namespace lattn::test
