// In-process communicator: one object per rank (thread) of a group in one
// process, over host memory (lattn/communicator.h, docs/dcp.md).
//
// Each collective is two rendezvous: every rank publishes its send tensor and
// waits until all have; every rank then reads the others' sends into its own
// recv and waits again, so no rank returns (and lets its caller reuse the send
// buffer) while another is still reading it. Over GPU buffers (one device
// for the whole group) a rank first waits for its stream, so its send is
// complete before another rank copies it, and copies with the device's
// synchronous memcpy; sums are staged through the host.
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

#include "core/ops/device_ops.h"
#include "lattn/check.h"
#include "lattn/communicator.h"
#include "lattn/dtype.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

struct GroupState {
  GroupState(int world, Device dev) : world_size(world), device(dev), sends(size_t(world)) {}
  const int world_size;
  const Device device;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<Tensor> sends;  // published by each rank between the two rendezvous

  void rendezvous() {
    std::unique_lock lock(mutex);
    const uint64_t gen = generation;
    if (++arrived == world_size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen; });
    }
  }
};

// Bytes of `n` elements of a contiguous tensor starting at element `first`.
const char* elem_ptr(const Tensor& t, int64_t first) {
  return static_cast<const char*>(t.data()) + first * t.element_size();
}

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<GroupState> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size; }
  Device device() const override { return group_->device; }
  const char* kind() const override { return "in-process"; }

  void all_gather(const Tensor& send, const Tensor& recv, Stream stream) override {
    check_collective_args("all_gather", *this, send, recv);
    check_arg(recv.numel() == send.numel() * world_size(), "all_gather", "recv",
              "have world_size * send.numel() = " + std::to_string(send.numel() * world_size()) + " elements",
              std::to_string(recv.numel()));
    const auto sends = publish(send, stream);
    const size_t bytes = send.nbytes();
    for (int r = 0; r < world_size(); ++r) {
      copy_bytes(static_cast<char*>(recv.data()) + size_t(r) * bytes, sends[size_t(r)].data(), bytes);
    }
    group_->rendezvous();
  }

  void reduce_scatter_sum(const Tensor& send, const Tensor& recv, Stream stream) override {
    check_collective_args("reduce_scatter_sum", *this, send, recv);
    check_dtype_in("reduce_scatter_sum", "send", send, {DType::f32, DType::f16, DType::bf16});
    check_arg(send.numel() == recv.numel() * world_size(), "reduce_scatter_sum", "recv",
              "have send.numel() / world_size = " + std::to_string(send.numel() / world_size()) + " elements",
              std::to_string(recv.numel()));
    const auto sends = publish(send, stream);
    const int64_t m = recv.numel();
    const DType dt = send.dtype();
    const size_t es = size_t(send.element_size());
    // This rank's slice of every send (staged on the host for a device group).
    const size_t world = size_t(world_size());
    std::vector<std::vector<char>> staged(world);
    std::vector<const void*> slices(world);
    for (int r = 0; r < world_size(); ++r) {
      const char* src = elem_ptr(sends[size_t(r)], rank_ * m);
      if (group_->device.is_cpu()) {
        slices[size_t(r)] = src;
      } else {
        staged[size_t(r)].resize(size_t(m) * es);
        copy_bytes(staged[size_t(r)].data(), src, size_t(m) * es, /*to_host=*/true);
        slices[size_t(r)] = staged[size_t(r)].data();
      }
    }
    std::vector<char> host_out(group_->device.is_cpu() ? 0 : size_t(m) * es);
    void* dst = group_->device.is_cpu() ? recv.data() : host_out.data();
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.f;  // ranks added in rank order: the same bits on every rank
      for (int r = 0; r < world_size(); ++r) acc += load_as_f32(slices[size_t(r)], dt, i);
      store_from_f32(dst, dt, i, acc);
    }
    if (!group_->device.is_cpu()) copy_bytes(recv.data(), host_out.data(), size_t(m) * es, false, /*from_host=*/true);
    group_->rendezvous();
  }

  void all_to_all(const Tensor& send, const Tensor& recv, Stream stream) override {
    check_collective_args("all_to_all", *this, send, recv);
    check_arg(send.numel() == recv.numel() && send.numel() % world_size() == 0, "all_to_all", "recv",
              "have send.numel() elements, a multiple of world_size", std::to_string(recv.numel()));
    const auto sends = publish(send, stream);
    const int64_t m = send.numel() / world_size();
    const size_t bytes = size_t(m) * size_t(send.element_size());
    for (int r = 0; r < world_size(); ++r) {
      copy_bytes(static_cast<char*>(recv.data()) + size_t(r) * bytes, elem_ptr(sends[size_t(r)], rank_ * m), bytes);
    }
    group_->rendezvous();
  }

  void barrier(Stream stream) override {
    if (!group_->device.is_cpu()) detail::device_ops(group_->device).synchronize(stream);
    group_->rendezvous();
  }

 private:
  // Copies within the group's memory (or from it to the host / back),
  // synchronously.
  void copy_bytes(void* dst, const void* src, size_t bytes, bool to_host = false, bool from_host = false) const {
    const Device dev = group_->device;
    if (dev.is_cpu()) {
      std::memcpy(dst, src, bytes);
      return;
    }
    detail::device_ops(dev).memcpy(dst, to_host ? Device::cpu() : dev, src, from_host ? Device::cpu() : dev, bytes,
                                   nullptr);
  }

  // Publishes `send`, waits for every rank, and checks that all ranks passed
  // the same shape and dtype (every rank sees the same mismatch and throws,
  // so none is left waiting).
  std::vector<Tensor> publish(const Tensor& send, Stream stream) {
    // The send must be complete before another rank reads it.
    if (!group_->device.is_cpu()) detail::device_ops(group_->device).synchronize(stream);
    {
      std::lock_guard lock(group_->mutex);
      group_->sends[size_t(rank_)] = send;
    }
    group_->rendezvous();
    std::vector<Tensor> sends;
    {
      std::lock_guard lock(group_->mutex);
      sends = group_->sends;
    }
    for (int r = 0; r < world_size(); ++r) {
      const Tensor& s = sends[size_t(r)];
      if (s.dtype() != send.dtype() || s.numel() != send.numel()) {
        throw ValueError("collective: rank " + std::to_string(r) + " passed send " + s.describe() + " but rank " +
                         std::to_string(rank_) + " passed " + send.describe() +
                         "; every rank must pass the same shape and dtype");
      }
    }
    return sends;
  }

  std::shared_ptr<GroupState> group_;
  int rank_;
};

}  // namespace

void check_collective_args(const char* op, const Communicator& comm, const Tensor& send, const Tensor& recv) {
  check_defined(op, "send", send);
  check_defined(op, "recv", recv);
  check_device(op, "send", send, comm.device());
  check_device(op, "recv", recv, comm.device());
  check_contiguous(op, "send", send);
  check_contiguous(op, "recv", recv);
  check_arg(send.dtype() == recv.dtype(), op, "recv",
            std::string("have dtype ") + dtype_name(send.dtype()) + " (as send)", dtype_name(recv.dtype()));
}

std::vector<std::unique_ptr<Communicator>> make_in_process_group(int world_size, Device device) {
  check_arg(world_size >= 1, "make_in_process_group", "world_size", "be >= 1", std::to_string(world_size));
  auto group = std::make_shared<GroupState>(world_size, device);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r) comms.push_back(std::make_unique<InProcessCommunicator>(group, r));
  return comms;
}

}  // namespace lattn
