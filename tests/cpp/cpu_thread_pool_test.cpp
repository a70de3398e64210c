// lattn's thread pool (src/cpu/thread_pool.h): every job runs exactly once,
// slots are in range and never run two jobs at once, a call returns only
// after all its jobs finished, nested and concurrent calls run inline, and
// thousands of back-to-back calls (the claim word's generation changing
// under late workers) lose or repeat nothing, and calls whose workers keep
// stalling them fall back to the caller alone.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"

namespace lattn::cpu {
namespace {

// Runs `jobs` jobs on `threads` threads and checks the bookkeeping.
void check_call(int64_t jobs, int threads) {
  std::vector<std::atomic<int>> runs(static_cast<size_t>(jobs));
  std::vector<std::atomic<int>> busy(static_cast<size_t>(threads));
  std::atomic<int> bad_slot{0}, overlap{0};
  parallel_jobs(jobs, threads, [&](int64_t job, int slot) {
    if (slot < 0 || slot >= threads) {
      bad_slot.fetch_add(1);
      return;
    }
    if (busy[size_t(slot)].fetch_add(1) != 0) overlap.fetch_add(1);
    runs[size_t(job)].fetch_add(1);
    busy[size_t(slot)].fetch_sub(1);
  });
  EXPECT_EQ(bad_slot.load(), 0) << jobs << " jobs, " << threads << " threads";
  EXPECT_EQ(overlap.load(), 0) << jobs << " jobs, " << threads << " threads";
  for (int64_t j = 0; j < jobs; ++j) {
    ASSERT_EQ(runs[size_t(j)].load(), 1) << "job " << j << " of " << jobs << ", " << threads << " threads";
  }
}

TEST(CpuThreadPool, EveryJobRunsOnceOnAValidSlot) {
  for (int threads : {1, 2, 3, 5}) {
    for (int64_t jobs : {0, 1, 2, 3, 7, 64, 1000}) check_call(jobs, threads);
  }
}

TEST(CpuThreadPool, ReturnsOnlyAfterEveryJobFinished) {
  // Jobs of unequal length: the call must not return while a worker still runs one.
  for (int round = 0; round < 50; ++round) {
    std::vector<int> done(17, 0);
    parallel_jobs(17, 3, [&](int64_t job, int) {
      volatile double x = 0;
      for (int i = 0; i < 2000 * int(job % 5); ++i) x = x + 1;
      done[size_t(job)] = 1;  // plain store: the call's return must publish it
    });
    for (int j = 0; j < 17; ++j) ASSERT_EQ(done[size_t(j)], 1) << "round " << round << " job " << j;
  }
}

TEST(CpuThreadPool, ManyBackToBackCallsLoseNothing) {
  std::atomic<int64_t> sum{0};
  int64_t expected = 0;
  for (int call = 0; call < 20000; ++call) {
    const int64_t jobs = 1 + call % 4;
    parallel_jobs(jobs, 2 + call % 2, [&](int64_t job, int) { sum.fetch_add(job + 1); });
    expected += jobs * (jobs + 1) / 2;
  }
  EXPECT_EQ(sum.load(), expected);
}

TEST(CpuThreadPool, NestedCallsRunInline) {
  std::atomic<int> inner{0};
  parallel_jobs(8, 2, [&](int64_t, int) {
    const std::thread::id me = std::this_thread::get_id();
    parallel_jobs(5, 2, [&](int64_t, int slot) {
      EXPECT_EQ(slot, 0);
      EXPECT_EQ(std::this_thread::get_id(), me);
      inner.fetch_add(1);
    });
  });
  EXPECT_EQ(inner.load(), 40);
}

TEST(CpuThreadPool, ConcurrentCallersBothFinish) {
  // A call made while another thread's call runs runs inline: both complete.
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&total] {
      for (int call = 0; call < 300; ++call) {
        parallel_jobs(6, 2, [&](int64_t job, int) { total.fetch_add(job); });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 300 * 15);
}

TEST(CpuThreadPool, StalledCallsFallBackToTheCaller) {
  // What another process holding a core looks like to the pool: a job a
  // worker runs takes 20 ms, so the caller waits for it. Two such calls in a
  // row make the pool run the next calls on the caller alone for a while
  // (docs/cpu.md, "Threads and memory"); a call made then runs every job on
  // slot 0. The caller's first job waits (up to 50 ms) until a worker has
  // claimed a job: on a loaded machine (ctest -j on every core) a worker that
  // is not scheduled in time leaves every job to the caller, which is no sign
  // of contention, and 200 such calls never backed off. The worker's 20 ms
  // dwarf the delays such a machine adds to the caller's own jobs (a stall
  // needs the caller's wait to exceed its own work).
  const auto stalling_call = [](int64_t jobs) {
    std::atomic<int> worker_jobs{0};
    std::atomic<bool> first_own{true};
    parallel_jobs(jobs, 2, [&](int64_t, int slot) {
      if (slot == 0) {
        const auto now = std::chrono::steady_clock::now();
        const auto end =
            now + (first_own.exchange(false) ? std::chrono::milliseconds(50) : std::chrono::milliseconds(0));
        while (worker_jobs.load() == 0 && std::chrono::steady_clock::now() < end) {}
        return;
      }
      worker_jobs.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
    return worker_jobs.load();
  };
  bool backed_off = false;
  for (int call = 0; call < 200 && !backed_off; ++call) {
    stalling_call(4);
    backed_off = parallel_jobs_backing_off();
  }
  ASSERT_TRUE(backed_off) << "200 calls stalled by their worker and the pool still used it";
  EXPECT_EQ(stalling_call(8), 0) << "a call while backing off ran a job on a worker";
  check_call(64, 2);  // and whatever the pool decides, every job still runs once
}

}  // namespace
}  // namespace lattn::cpu
