// StepPlans ids (see lattn/step_plans.h).
#include "lattn/step_plans.h"

#include <atomic>

namespace lattn {

uint64_t StepPlans::next_id() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace lattn
