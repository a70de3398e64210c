// Definitions of lattn's CUDA stream/graph/timer helpers (cuda/common/
// runtime_utils.h) for builds without CUDA (src/cuda/absent/ is compiled only there): each refuses with one sentence,
// so tests and tools that name them still link and report the reason.
#include "cuda/common/runtime_utils.h"

#include <string>

#include "lattn/errors.h"

namespace lattn::cuda {
namespace {
[[noreturn]] void no_cuda(const char* what) { throw ValueError(std::string(what) + ": lattn was built without CUDA"); }
}  // namespace

StreamHandle::StreamHandle(int) { no_cuda("StreamHandle"); }
StreamHandle::~StreamHandle() = default;
void StreamHandle::synchronize() const { no_cuda("StreamHandle::synchronize"); }
CapturedGraph::~CapturedGraph() = default;
void CapturedGraph::begin(Stream) { no_cuda("CapturedGraph::begin"); }
void CapturedGraph::end() { no_cuda("CapturedGraph::end"); }
void CapturedGraph::replay(Stream) const { no_cuda("CapturedGraph::replay"); }
EventTimer::EventTimer() { no_cuda("EventTimer"); }
EventTimer::~EventTimer() = default;
void EventTimer::start(Stream) { no_cuda("EventTimer::start"); }
void EventTimer::stop(Stream) { no_cuda("EventTimer::stop"); }
float EventTimer::elapsed_ms() const { no_cuda("EventTimer::elapsed_ms"); }
void fill_random_device(void*, DType, int64_t, uint64_t, float, Stream) { no_cuda("fill_random_device"); }
void device_synchronize(int) { no_cuda("device_synchronize"); }
void check_last_error(const char*) {}

}  // namespace lattn::cuda
