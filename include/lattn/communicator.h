// lattn/communicator.h — the few collectives multi-GPU MLA needs (docs/dcp.md).
//
// Decode context parallelism (lattn/dcp.h) shards every request's latent
// cache over the ranks of a group; combining their partial results needs an
// all-gather, a reduce-scatter or an all-to-all. lattn does not own processes
// or a distributed runtime: the engine hands lattn a Communicator for its
// group. Two implementations ship:
//   * NCCL (make_nccl_communicator): one process (or thread) per GPU, from an
//     ncclUniqueId the engine distributes, or wrapping an ncclComm_t the
//     engine already has. Available when lattn was built with CUDA and NCCL.
//   * in-process (make_in_process_group): one communicator per thread of one
//     process, over host memory (tests, the CPU backend, single-process
//     engines).
//
// Every collective is called by all ranks of the group with tensors of the
// same shapes and dtypes, contiguous, on the communicator's device, and is
// ordered on `stream` (CUDA) or complete on return (host). Shapes:
//   all_gather(send [n...], recv [world, n...])          recv[r] = send of rank r
//   reduce_scatter_sum(send [world * m, ...], recv [m, ...])
//                                                        recv = Σ_r send_r[rank*m : (rank+1)*m]
//   all_to_all(send [world * m, ...], recv [world * m, ...])
//                                                        recv[r*m : (r+1)*m] = send_r[rank*m : (rank+1)*m]
// f32, f16 and bf16 are reduced; every dtype is gathered / exchanged.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Device device() const = 0;
  // "in-process" or "nccl"
  virtual const char* kind() const = 0;

  virtual void all_gather(const Tensor& send, const Tensor& recv, Stream stream = nullptr) = 0;
  virtual void reduce_scatter_sum(const Tensor& send, const Tensor& recv, Stream stream = nullptr) = 0;
  virtual void all_to_all(const Tensor& send, const Tensor& recv, Stream stream = nullptr) = 0;
  // Returns once every rank has called it (host side; for NCCL after the
  // stream's work so far has completed on this rank).
  virtual void barrier(Stream stream = nullptr) = 0;
};

// `world_size` communicators of one in-process group over the memory of
// `device` (the host, or one GPU whose buffers every rank passes): rank r's
// object must be used by one thread at a time; each collective blocks until
// all ranks have entered it. Over GPU buffers each collective first waits for
// its caller's stream and copies synchronously (a test and single-process
// tool, not a fast path: NCCL is the GPU communicator).
std::vector<std::unique_ptr<Communicator>> make_in_process_group(int world_size, Device device = Device::cpu());

// NCCL. The id is ncclUniqueId's 128 bytes (made by nccl_unique_id() on one
// rank and sent to the others by the engine's own means).
using NcclUniqueIdBytes = std::array<char, 128>;
bool nccl_available();               // built with NCCL
NcclUniqueIdBytes nccl_unique_id();  // BackendUnavailableError without NCCL
// Joins the group (blocking until all ranks join); `device` is this rank's GPU.
std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueIdBytes& id, int world_size, int rank,
                                                     Device device);
// Wraps an existing ncclComm_t (passed as void* so this header needs no NCCL
// header); lattn does not destroy it.
std::unique_ptr<Communicator> wrap_nccl_communicator(void* nccl_comm, Device device);

// Validation shared by the implementations (ValueError naming the argument).
void check_collective_args(const char* op, const Communicator& comm, const Tensor& send, const Tensor& recv);

}  // namespace lattn
