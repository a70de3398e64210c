// src/cuda/common/index_check.h — bound checks of device-resident indices
// (slot mappings, block tables) that the host cannot see before a launch.
//
// Kernels that follow such an index check it against the cache (and the
// table's width); a bad one is skipped — nothing outside the cache is read or
// written — and recorded in this device's violation words, which live in
// zero-copy (mapped, pinned) host memory so the host can read them without a
// CUDA call. The host turns a recorded violation into ValueError:
//   * at the entry of the next CUDA op on that device (the next host-visible
//     point): "an earlier call ... followed ... outside the cache";
//   * right after the launch that recorded it, naming the argument with the
//     same sentence the CPU path uses, when LATTN_CHECK_INDICES=1 (the tests
//     and `lattn run --verify` set it; it synchronizes the stream, so it is
//     skipped while a CUDA graph is being captured).
// docs/reliability.md describes the promise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace lattn::cuda {

// What a kernel found; one word each (plain stores of 1: no atomics on host memory).
enum IndexViolationKind : int {
  kBadSlot = 0,         // slot_mapping entry >= num_blocks * block_size
  kBadBlockId = 1,      // block-table entry outside [0, num_blocks)
  kBadTableColumn = 2,  // a sequence needs a block-table column past the table's width
  kBadRowRange = 3,     // a cu_seq_lens range outside the destination rows
  kNumViolationKinds = 4
};

// The device address of `device`'s violation words ([kNumViolationKinds]
// uint32), allocated once per process; nullptr when mapped memory is
// unavailable (checking is then off, the kernels still skip bad ids).
uint32_t* index_violation_words(int device);

// LATTN_CHECK_INDICES=1 in the environment.
bool check_indices_enabled();

// Throws ValueError (and clears the words) when an earlier launch on
// `device` recorded a violation. op: the call that notices.
void raise_pending_index_violation(int device, const char* op);

// After `op`'s launch on `stream`: with LATTN_CHECK_INDICES=1 (and the stream
// not capturing), waits for the stream and throws ValueError
// "<op>: argument '<arg>' must <expected>, got an entry outside it on cuda:N
// (found on the GPU, skipped)" when this launch recorded a violation.
void check_launch_indices(int device, cudaStream_t stream, const char* op, const char* arg,
                          const std::string& expected);

}  // namespace lattn::cuda
