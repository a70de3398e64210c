// Violation words in mapped host memory and their host-side checks (see index_check.h).
#include "cuda/common/index_check.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cuda/common/cuda_check.h"
#include "lattn/errors.h"

namespace lattn::cuda {
namespace {

constexpr int kMaxDevices = 64;

struct Words {
  uint32_t* host = nullptr;    // [kMaxDevices][kNumViolationKinds]
  uint32_t* device = nullptr;  // the same memory, as kernels address it
};

const Words& words() {
  static Words w;
  static std::once_flag once;
  std::call_once(once, [] {
    void* host = nullptr;
    const size_t bytes = sizeof(uint32_t) * kMaxDevices * kNumViolationKinds;
    // Portable: usable from every device's kernels (unified addressing).
    if (cudaHostAlloc(&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      return;  // no mapped memory: the kernels still skip bad ids; nothing is reported
    }
    void* device = nullptr;
    if (cudaHostGetDevicePointer(&device, host, 0) != cudaSuccess) {
      cudaGetLastError();
      cudaFreeHost(host);
      return;
    }
    std::memset(host, 0, bytes);
    w.host = static_cast<uint32_t*>(host);
    w.device = static_cast<uint32_t*>(device);
  });
  return w;
}

// Reads and clears `device`'s words; the kinds found, as a bit set.
unsigned take_violations(int device) {
  const Words& w = words();
  if (w.host == nullptr || device < 0 || device >= kMaxDevices) return 0;
  volatile uint32_t* mine = w.host + device * kNumViolationKinds;
  unsigned found = 0;
  for (int k = 0; k < kNumViolationKinds; ++k) {
    if (mine[k] != 0) {
      found |= 1u << k;
      mine[k] = 0;
    }
  }
  return found;
}

std::string kinds_text(unsigned found) {
  std::string s;
  auto add = [&](const char* t) { s += (s.empty() ? "" : ", ") + std::string(t); };
  if (found & (1u << kBadSlot)) add("a slot_mapping entry past the cache");
  if (found & (1u << kBadBlockId)) add("a block-table id outside the cache");
  if (found & (1u << kBadTableColumn)) add("a sequence longer than its block-table row");
  if (found & (1u << kBadRowRange)) add("a cu_seq_lens range outside dst");
  return s;
}

}  // namespace

uint32_t* index_violation_words(int device) {
  const Words& w = words();
  if (w.device == nullptr || device < 0 || device >= kMaxDevices) return nullptr;
  return w.device + device * kNumViolationKinds;
}

bool check_indices_enabled() {
  const char* v = std::getenv("LATTN_CHECK_INDICES");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

void raise_pending_index_violation(int device, const char* op) {
  const unsigned found = take_violations(device);
  if (found == 0) return;
  throw ValueError(std::string(op) + ": an earlier call on cuda:" + std::to_string(device) + " followed " +
                   kinds_text(found) +
                   " (device-resident indices, checked on the GPU: the entries were skipped, nothing outside the "
                   "cache was touched, but that call's results are invalid); set LATTN_CHECK_INDICES=1 to stop at "
                   "the call itself");
}

void check_launch_indices(int device, cudaStream_t stream, const char* op, const char* arg,
                          const std::string& expected) {
  if (!check_indices_enabled()) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) return;
  LATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  const unsigned found = take_violations(device);
  if (found == 0) return;
  throw ValueError(std::string(op) + ": argument '" + arg + "' must " + expected + ", got " + kinds_text(found) +
                   " on cuda:" + std::to_string(device) + " (found on the GPU; the entries were skipped)");
}

}  // namespace lattn::cuda
