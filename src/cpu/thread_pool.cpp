// lattn's worker threads (see thread_pool.h).
//
// Claiming: one 64-bit word holds (call generation : 24 | jobs : 20 |
// next job : 20). A thread reads it, reads the call's body, then claims job
// `next` by compare-and-swap of the same word; the swap succeeds only while
// that call still has unclaimed jobs, and a caller does not start another
// call before all jobs of its current one are finished (hence claimed), so a
// successful claim proves that the body read before it was this call's. A
// thread that wakes up after the call is over finds next == jobs, or another
// generation, and touches nothing.
#include "cpu/thread_pool.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <mutex>
#include <thread>
#include <vector>

namespace lattn::cpu {
namespace {

constexpr int kCountBits = 20;
constexpr uint64_t kCountMask = (uint64_t(1) << kCountBits) - 1;
constexpr int64_t kMaxJobsPerCall = int64_t(kCountMask);
// Spin budgets before sleeping. A worker keeps spinning this long after a
// call because decode issues its calls back to back (projection, attention,
// projection, next layer); the caller spins for about one job's length.
constexpr auto kWorkerSpin = std::chrono::microseconds(200);
constexpr auto kCallerSpin = std::chrono::microseconds(50);

uint64_t claim_word(uint64_t gen, uint64_t jobs, uint64_t next) {
  return gen << (2 * kCountBits) | jobs << kCountBits | next;
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>& word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
}

// A spin-wait hint: lets the core's other work (and, under a hypervisor,
// the host) run while this thread polls.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until pred() or `budget` has passed; true if pred() held.
template <class Pred>
bool spin_until(Pred pred, std::chrono::microseconds budget) {
  const auto end = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= end) return pred();
  }
}

thread_local bool t_in_job = false;  // nested calls run inline

class Pool {
 public:
  void run(int64_t jobs, int threads, void* ctx, JobBody body) {
    std::unique_lock<std::mutex> lock(caller_, std::try_to_lock);
    if (!lock.owns_lock() || t_in_job || threads <= 1 || jobs <= 1) {
      run_inline(jobs, ctx, body);
      return;
    }
    grow(threads - 1);
    ++gen_;
    ctx_.store(ctx, std::memory_order_relaxed);
    body_.store(body, std::memory_order_relaxed);
    threads_.store(threads, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    claim_.store(claim_word(gen_ & ((uint64_t(1) << 24) - 1), uint64_t(jobs), 0), std::memory_order_release);
    wake_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake(wake_, INT_MAX);

    work(0);
    const uint32_t all = uint32_t(jobs);
    if (!spin_until([&] { return done_.load(std::memory_order_acquire) == all; }, kCallerSpin)) {
      // Sleep: a worker that the OS preempted in its job may then run here.
      caller_sleeping_.store(1, std::memory_order_seq_cst);
      for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) != all;) futex_wait(done_, d);
      caller_sleeping_.store(0, std::memory_order_relaxed);
    }
  }

 private:
  static void run_inline(int64_t jobs, void* ctx, JobBody body) {
    const bool outer = t_in_job;
    t_in_job = true;
    for (int64_t j = 0; j < jobs; ++j) body(ctx, j, 0);
    t_in_job = outer;
  }

  // Claims and runs jobs of the current call until none is left.
  void work(int slot) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t jobs = (c >> kCountBits) & kCountMask, next = c & kCountMask;
      if (next >= jobs) return;
      JobBody body = body_.load(std::memory_order_relaxed);
      void* ctx = ctx_.load(std::memory_order_relaxed);
      if (slot >= threads_.load(std::memory_order_relaxed)) return;
      if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      t_in_job = true;
      body(ctx, int64_t(next), slot);
      t_in_job = slot != 0;
      if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == uint32_t(jobs) &&
          caller_sleeping_.load(std::memory_order_seq_cst)) {
        futex_wake(done_, 1);
      }
      c = claim_.load(std::memory_order_acquire);
    }
  }

  void worker(int slot) {
    t_in_job = true;  // a job's own parallel_jobs calls run inline
    uint32_t seen = wake_.load(std::memory_order_acquire);
    for (;;) {
      if (!spin_until([&] { return wake_.load(std::memory_order_acquire) != seen; }, kWorkerSpin)) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (wake_.load(std::memory_order_seq_cst) == seen) futex_wait(wake_, seen);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = wake_.load(std::memory_order_acquire);
      work(slot);
    }
  }

  // Workers are created on first need and live as long as the process.
  void grow(int workers) {
    while (int(workers_) < workers) {
      const int slot = ++workers_;
      std::thread([this, slot] { worker(slot); }).detach();
    }
  }

  std::mutex caller_;
  uint64_t gen_ = 0;
  int workers_ = 0;
  std::atomic<uint64_t> claim_{0};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<JobBody> body_{nullptr};
  std::atomic<int> threads_{0};
  std::atomic<uint32_t> done_{0};
  std::atomic<uint32_t> caller_sleeping_{0};
  std::atomic<uint32_t> wake_{0};
  std::atomic<int> sleepers_{0};
};

Pool& pool() {
  // Never destroyed: detached workers may still wait on it while the process exits.
  static Pool* p = new Pool;
  return *p;
}

}  // namespace

void parallel_jobs(int64_t jobs, int threads, void* ctx, JobBody body) {
  for (int64_t base = 0; base < jobs; base += kMaxJobsPerCall) {
    const int64_t n = jobs - base < kMaxJobsPerCall ? jobs - base : kMaxJobsPerCall;
    if (base == 0 && n == jobs) {
      pool().run(n, threads, ctx, body);
      continue;
    }
    struct Offset {
      void* ctx;
      JobBody body;
      int64_t base;
    } off{ctx, body, base};
    pool().run(n, threads, &off, [](void* o, int64_t job, int slot) {
      const Offset& f = *static_cast<Offset*>(o);
      f.body(f.ctx, f.base + job, slot);
    });
  }
}

}  // namespace lattn::cpu
