// lattn/step_plans.h — the plans of one step, shared by every layer.
//
// A step's decode view carries one StepPlans (DecodeMetadata::plans). Every
// layer's backend instance that runs the step asks it for its plan by a key
// that names the backend and whatever else the plan depends on (heads,
// threads, ...): the first layer makes the plan, the other layers of the step
// reuse it. So a step is planned once, whatever the number of layers, as
// vLLM's metadata builder plans once per step. A new build (or advance_step)
// gives the metadata a new StepPlans; copies of one metadata share theirs.
//
// A backend that reuses a plan still checks it against the metadata it is
// handed, so a metadata whose arrays were edited in place is planned afresh.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace lattn {

class StepPlans {
 public:
  StepPlans() : id_(next_id()) {}
  StepPlans(const StepPlans&) = delete;
  StepPlans& operator=(const StepPlans&) = delete;

  // Unique in the process (never reused, unlike an address).
  uint64_t id() const { return id_; }

  // The plan stored under `key`, made by make() (returning a Plan) by the
  // first caller; later callers get the same object. The key must name the
  // Plan type (a key is used with one type only). If make() throws, nothing
  // is stored. Thread-safe.
  template <class Plan, class Make>
  std::shared_ptr<const Plan> get_or_make(const std::string& key, Make&& make) {
    std::lock_guard lock(mutex_);
    std::shared_ptr<const void>& slot = plans_[key];
    if (!slot) slot = std::make_shared<const Plan>(std::forward<Make>(make)());
    return std::static_pointer_cast<const Plan>(slot);
  }

  // Number of plans made for this step (tests and benchmarks report it).
  size_t size() const {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    for (const auto& [key, plan] : plans_) n += plan != nullptr;
    return n;
  }

 private:
  static uint64_t next_id();

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const void>> plans_;
  uint64_t id_ = 0;
};

}  // namespace lattn
