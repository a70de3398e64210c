// lattn's worker threads (see thread_pool.h).
//
// Claiming: slot s owns the jobs s, s + T, s + 2T, ... of a call on T
// threads and takes them first; once its own are gone it takes the others'
// (a slot whose thread is off its core leaves its jobs to the rest). Owning
// the same jobs call after call keeps each split of the cache in the cache
// of the core that read it last step. Per slot, one 64-bit word holds (call
// generation : 24 | T - 1 : 8 | jobs of the slot : 16 | next : 16). A
// thread reads a word, reads the call's body, then claims job `next` of that
// slot by compare-and-swap of the same word; the swap succeeds only while
// that call still has unclaimed jobs, and a caller does not start another
// call before all jobs of its current one are finished (hence claimed), so a
// successful claim proves that the body read before it was this call's. A
// thread that wakes up after the call is over finds every slot's jobs gone,
// or another generation, and touches nothing.
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

constexpr int kCountBits = 16;
constexpr uint64_t kCountMask = (uint64_t(1) << kCountBits) - 1;
constexpr int kMaxSlots = 256;                            // threads per call (T - 1 fits in 8 bits)
constexpr int64_t kMaxJobsPerCall = int64_t(kCountMask);  // per slot, hence per call too
// Spin budgets before sleeping. A worker keeps spinning this long after a
// call because decode issues its calls back to back (projection, attention,
// projection, next layer); the caller spins for about one job's length.
constexpr auto kWorkerSpin = std::chrono::microseconds(200);
constexpr auto kCallerSpin = std::chrono::microseconds(50);
// Contention backoff (docs/cpu.md, "Threads and memory"). Signs that another
// process holds a core: a call of at least kJudgedCall in which the caller,
// or an awake worker, ran no job (a worker woken by the call can take the
// caller's core), or after which the caller waited kStalledWait for a
// claimed job. After two such calls in a row the next calls run on the
// caller alone for a window that doubles (kFirstWindow ... kLastWindow) while
// the signs repeat, and resets after a call of at least kJudgedCall in which
// both sides ran jobs (a woken worker that did not come in time is neither:
// the call cost what the caller alone costs). Measured beside one busy
// process on two cores (H16 B1 S4096): two threads 810-970 us a step, one
// 757 us.
constexpr auto kJudgedCall = std::chrono::microseconds(50);
constexpr auto kStalledWait = std::chrono::microseconds(200);
constexpr auto kFirstWindow = std::chrono::milliseconds(10);
constexpr auto kLastWindow = std::chrono::milliseconds(160);

uint64_t claim_word(uint64_t gen, int threads, uint64_t jobs, uint64_t next) {
  return gen << 40 | uint64_t(threads - 1) << 32 | jobs << kCountBits | next;
}
uint64_t word_gen(uint64_t w) { return w >> 40; }
int word_threads(uint64_t w) { return int((w >> 32) & 0xff) + 1; }

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
    const auto start = std::chrono::steady_clock::now();
    if (backing_off(start)) {  // another process holds a core
      run_inline(jobs, ctx, body);
      return;
    }
    if (threads > kMaxSlots) threads = kMaxSlots;
    grow(threads - 1);
    // A worker that has not started yet says nothing about the machine.
    const bool all_started = started_.load(std::memory_order_acquire) >= threads - 1;
    ++gen_;
    ctx_.store(ctx, std::memory_order_relaxed);
    body_.store(body, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    calls_jobs_.store(uint32_t(jobs), std::memory_order_relaxed);
    const uint64_t gen = gen_ & ((uint64_t(1) << 24) - 1);
    for (int s = 0; s < threads; ++s) {
      const uint64_t own = jobs > s ? uint64_t((jobs - s + threads - 1) / threads) : 0;
      slots_[s].claim.store(claim_word(gen, threads, own, 0), std::memory_order_release);
    }
    wake_.fetch_add(1, std::memory_order_seq_cst);
    const int sleeping = sleepers_.load(std::memory_order_seq_cst);
    if (sleeping > 0) futex_wake(wake_, INT_MAX);

    const int64_t own_jobs = work(0);
    const auto own_end = std::chrono::steady_clock::now();
    const uint32_t all = uint32_t(jobs);
    if (!spin_until([&] { return done_.load(std::memory_order_acquire) == all; }, kCallerSpin)) {
      // Sleep: a worker that the OS preempted in its job may then run here.
      caller_sleeping_.store(1, std::memory_order_seq_cst);
      for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) != all;) futex_wait(done_, d);
      caller_sleeping_.store(0, std::memory_order_relaxed);
    }
    if (all_started) judge_contention(start, own_end, own_jobs, jobs, sleeping > 0);
  }

  bool backing_off(std::chrono::steady_clock::time_point now) const {
    return now.time_since_epoch().count() < alone_until_.load(std::memory_order_relaxed);
  }

 private:
  // After a parallel call of `jobs` jobs, `own_jobs` run by the caller; `woken`:
  // a worker was asleep when it started. A stall = the caller waited
  // kStalledWait and longer than it worked (a worker on its own core
  // finishes its last job within about one job's length; a causal prefill's
  // last jobs are its longest, so the caller's mean job is no bound).
  void judge_contention(std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point own_end,
                        int64_t own_jobs, int64_t jobs, bool woken) {
    const auto end = std::chrono::steady_clock::now();
    if (end - start < kJudgedCall) return;  // too short to tell
    const auto own = own_end - start, wait = end - own_end;
    const bool caller_idle = own_jobs == 0, worker_idle = own_jobs == jobs;
    const bool stalled = wait >= kStalledWait && wait > own;
    if (worker_idle && woken && !stalled) return;  // a late wake-up: no sign either way
    const bool contended = caller_idle || worker_idle || stalled;
    if (!contended) {
      strikes_ = 0;
      window_ = kFirstWindow;
      return;
    }
    if (++strikes_ < 2) return;
    alone_until_.store(end.time_since_epoch().count() + std::chrono::steady_clock::duration(window_).count(),
                       std::memory_order_relaxed);
    if (window_ < kLastWindow) window_ *= 2;
  }

  static void run_inline(int64_t jobs, void* ctx, JobBody body) {
    const bool outer = t_in_job;
    t_in_job = true;
    for (int64_t j = 0; j < jobs; ++j) body(ctx, j, 0);
    t_in_job = outer;
  }

  // Claims and runs jobs of the current call until none is left: this
  // slot's own first, then the other slots'. Returns how many it ran.
  int64_t work(int slot) {
    const uint64_t mine = slots_[slot].claim.load(std::memory_order_acquire);
    const int threads = word_threads(mine);
    int64_t ran = 0;
    if (slot >= threads) return ran;  // not part of this call (or a stale word: nothing to do)
    for (int k = 0; k < threads; ++k) {
      const int owner = (slot + k) % threads;
      std::atomic<uint64_t>& word = slots_[owner].claim;
      uint64_t w = word.load(std::memory_order_acquire);
      for (;;) {
        if (word_gen(w) != word_gen(mine)) break;  // another call's word
        const uint64_t own = (w >> kCountBits) & kCountMask, next = w & kCountMask;
        if (next >= own) break;
        JobBody body = body_.load(std::memory_order_relaxed);
        void* ctx = ctx_.load(std::memory_order_relaxed);
        if (!word.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
        t_in_job = true;
        body(ctx, int64_t(owner) + int64_t(next) * threads, slot);
        t_in_job = slot != 0;
        ++ran;
        const uint32_t all = calls_jobs_.load(std::memory_order_relaxed);
        if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == all &&
            caller_sleeping_.load(std::memory_order_seq_cst)) {
          futex_wake(done_, 1);
        }
        w = word.load(std::memory_order_acquire);
      }
    }
    return ran;
  }

  void worker(int slot) {
    started_.fetch_add(1, std::memory_order_release);
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
    while (workers_ < workers) {
      const int slot = ++workers_;
      std::thread([this, slot] { worker(slot); }).detach();
    }
  }

  std::mutex caller_;
  // Contention backoff, touched only by the thread holding caller_.
  std::atomic<std::chrono::steady_clock::rep> alone_until_{0};  // steady_clock ticks
  std::chrono::milliseconds window_ = kFirstWindow;
  int strikes_ = 0;  // contended calls in a row
  uint64_t gen_ = 0;
  int workers_ = 0;
  std::atomic<int> started_{0};  // workers that have begun to run
  struct alignas(64) Slot {  // one cache line each: slots are claimed from concurrently
    std::atomic<uint64_t> claim{0};
  };
  Slot slots_[kMaxSlots];
  std::atomic<void*> ctx_{nullptr};
  std::atomic<JobBody> body_{nullptr};
  std::atomic<uint32_t> calls_jobs_{0};  // jobs of the current call
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

bool parallel_jobs_backing_off() { return pool().backing_off(std::chrono::steady_clock::now()); }

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
