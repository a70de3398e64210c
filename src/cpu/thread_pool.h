// src/cpu/thread_pool.h — lattn's own worker threads for the `cpu` decode
// backend and the projection GEMM (internal). docs/cpu.md, "Threads", says
// why and what it measured.
//
// A call is a list of jobs [0, jobs) claimed one at a time by whichever of
// its threads are running: on T threads, slot s owns jobs s, s + T, ... and
// takes them first (in order), then what is left of the others'. The calling
// thread works too (slot 0) and returns as soon as every job has finished.
// Nothing waits for a thread that never claimed a job. With OpenMP, every thread of a team must reach the
// barrier that ends a parallel region: on a machine where another process
// holds one core, a call then waits for the scheduler to hand that thread
// its core back (a time slice, milliseconds, for a step of a fraction of
// one), and OMP_WAIT_POLICY=passive, which avoids that, pays a sleep and a
// wake-up per region instead.
//
// Waiting: workers spin a short while after a call (in a decode step the next
// call comes within microseconds), then sleep on a futex; the caller spins a
// short while for jobs that other threads still run, then sleeps, so that
// the OS may run a preempted worker on its core.
//
// Under contention: calls whose workers were off their cores (another
// process holds a core) are followed by calls on the caller alone for a
// while, since two threads sharing one free core take longer than one
// (docs/cpu.md, "Threads and memory").
//
// One call at a time: a call made while another thread's call runs, or from
// inside a job, runs its jobs on the calling thread alone (slot 0).
#pragma once

#include <cstdint>
#include <type_traits>

namespace lattn::cpu {

// body(ctx, job, slot) for each job. `slot` in [0, threads) names the thread
// running the job within this call (0 = the caller), for per-thread scratch:
// one slot never runs two jobs at once. Jobs must not throw.
using JobBody = void (*)(void* ctx, int64_t job, int slot);
void parallel_jobs(int64_t jobs, int threads, void* ctx, JobBody body);

// True while calls run on the caller alone after signs of contention (for
// tests and diagnostics).
bool parallel_jobs_backing_off();

// The same with any callable f(int64_t job, int slot).
template <class F>
void parallel_jobs(int64_t jobs, int threads, F&& f) {
  using Fn = std::remove_reference_t<F>;
  parallel_jobs(jobs, threads, const_cast<void*>(static_cast<const void*>(&f)),
                [](void* ctx, int64_t job, int slot) { (*static_cast<Fn*>(ctx))(job, slot); });
}

}  // namespace lattn::cpu
