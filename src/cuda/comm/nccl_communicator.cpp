// NCCL communicator (lattn/communicator.h, docs/dcp.md): the real collective
// engine for GPUs. Compiled only when CMake found nccl.h beside the CUDA
// toolkit (LATTN_WITH_NCCL); src/core/dcp/nccl_absent.cpp answers otherwise.
//
// libnccl.so.2 is opened at first use (dlopen), not linked: lattn then loads
// on machines without NCCL, and inside an engine it shares the NCCL library
// the engine (PyTorch, vLLM) already loaded.
#if defined(LATTN_WITH_NCCL)
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <string>

#include "cuda/common/cuda_check.h"
#include "lattn/check.h"
#include "lattn/communicator.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

// The NCCL functions lattn calls, resolved from libnccl.so.2: X(member, symbol)
// for each, the one list that NcclApi's members and their loading both expand.
#define LATTN_NCCL_FUNCTIONS(X)           \
  X(get_error_string, ncclGetErrorString) \
  X(get_unique_id, ncclGetUniqueId)       \
  X(comm_init_rank, ncclCommInitRank)     \
  X(comm_destroy, ncclCommDestroy)        \
  X(comm_count, ncclCommCount)            \
  X(comm_user_rank, ncclCommUserRank)     \
  X(all_gather, ncclAllGather)            \
  X(reduce_scatter, ncclReduceScatter)    \
  X(all_reduce, ncclAllReduce)            \
  X(send, ncclSend)                       \
  X(recv, ncclRecv)                       \
  X(group_start, ncclGroupStart)          \
  X(group_end, ncclGroupEnd)

struct NcclApi {
#define LATTN_NCCL_MEMBER(member, symbol) decltype(&::symbol) member = nullptr;
  LATTN_NCCL_FUNCTIONS(LATTN_NCCL_MEMBER)
#undef LATTN_NCCL_MEMBER
  std::string error;  // why loading failed; empty when loaded
};

const NcclApi& nccl() {
  static NcclApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
      const char* e = dlerror();
      api.error = std::string("cannot open libnccl.so.2: ") + (e ? e : "unknown error");
      return;
    }
    auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && api.error.empty()) api.error = std::string("libnccl.so.2 has no symbol ") + name;
    };
#define LATTN_NCCL_LOAD(member, symbol) load(api.member, #symbol);
    LATTN_NCCL_FUNCTIONS(LATTN_NCCL_LOAD)
#undef LATTN_NCCL_LOAD
  });
  if (!api.error.empty()) throw BackendUnavailableError("NCCL: " + api.error);
  return api;
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    throw RuntimeError(std::string("NCCL ") + what + " failed: " + nccl().get_error_string(r));
  }
}

ncclDataType_t nccl_type(const char* op, const Tensor& t, bool reduce) {
  switch (t.dtype()) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      if (!reduce) return ncclInt32;
      break;
    case DType::i64:
      if (!reduce) return ncclInt64;
      break;
    case DType::fp8_e4m3:
    case DType::u8:
      if (!reduce) return ncclUint8;
      break;
  }
  throw ValueError(std::string(op) + ": send has dtype " + dtype_name(t.dtype()) +
                   ", which NCCL cannot reduce here (expected f32, f16 or bf16)");
}

cudaStream_t as_cuda(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, Device device, bool owned) : comm_(comm), device_(device), owned_(owned) {
    nccl_check(nccl().comm_count(comm_, &world_), "ncclCommCount");
    nccl_check(nccl().comm_user_rank(comm_, &rank_), "ncclCommUserRank");
  }
  ~NcclCommunicator() override {
    if (owned_) nccl().comm_destroy(comm_);
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  Device device() const override { return device_; }
  const char* kind() const override { return "nccl"; }

  void all_gather(const Tensor& send, const Tensor& recv, Stream stream) override {
    check_collective_args("all_gather", *this, send, recv);
    check_arg(recv.numel() == send.numel() * world_, "all_gather", "recv", "have world_size * send.numel() elements",
              std::to_string(recv.numel()));
    nccl_check(nccl().all_gather(send.data(), recv.data(), size_t(send.numel()), nccl_type("all_gather", send, false),
                                 comm_, as_cuda(stream)),
               "ncclAllGather");
  }

  void reduce_scatter_sum(const Tensor& send, const Tensor& recv, Stream stream) override {
    check_collective_args("reduce_scatter_sum", *this, send, recv);
    check_arg(send.numel() == recv.numel() * world_, "reduce_scatter_sum", "recv",
              "have send.numel() / world_size elements", std::to_string(recv.numel()));
    nccl_check(nccl().reduce_scatter(send.data(), recv.data(), size_t(recv.numel()),
                                     nccl_type("reduce_scatter_sum", send, true), ncclSum, comm_, as_cuda(stream)),
               "ncclReduceScatter");
  }

  void all_to_all(const Tensor& send, const Tensor& recv, Stream stream) override {
    check_collective_args("all_to_all", *this, send, recv);
    check_arg(send.numel() == recv.numel() && send.numel() % world_ == 0, "all_to_all", "recv",
              "have send.numel() elements, a multiple of world_size", std::to_string(recv.numel()));
    const ncclDataType_t dt = nccl_type("all_to_all", send, false);
    const size_t m = size_t(send.numel() / world_);
    const size_t bytes = m * size_t(send.element_size());
    nccl_check(nccl().group_start(), "ncclGroupStart");
    for (int r = 0; r < world_; ++r) {
      nccl_check(nccl().send(static_cast<const char*>(send.data()) + r * bytes, m, dt, r, comm_, as_cuda(stream)),
                 "ncclSend");
      nccl_check(nccl().recv(static_cast<char*>(recv.data()) + r * bytes, m, dt, r, comm_, as_cuda(stream)),
                 "ncclRecv");
    }
    nccl_check(nccl().group_end(), "ncclGroupEnd");
  }

  void barrier(Stream stream) override {
    // A one-element all-reduce, then wait for it: every rank has reached this point.
    if (!scratch_) LATTN_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
    nccl_check(nccl().all_reduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, as_cuda(stream)), "ncclAllReduce");
    LATTN_CUDA_CHECK(cudaStreamSynchronize(as_cuda(stream)));
  }

 private:
  ncclComm_t comm_;
  Device device_;
  bool owned_;
  int world_ = 1;
  int rank_ = 0;
  void* scratch_ = nullptr;
};

}  // namespace

bool nccl_available() {
  try {
    nccl();
    return true;
  } catch (const BackendUnavailableError&) {
    return false;
  }
}

NcclUniqueIdBytes nccl_unique_id() {
  ncclUniqueId id;
  nccl_check(nccl().get_unique_id(&id), "ncclGetUniqueId");
  NcclUniqueIdBytes bytes{};
  static_assert(sizeof(id) == sizeof(bytes), "ncclUniqueId is 128 bytes");
  std::memcpy(bytes.data(), &id, sizeof(id));
  return bytes;
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueIdBytes& id_bytes, int world_size, int rank,
                                                     Device device) {
  check_arg(world_size >= 1, "make_nccl_communicator", "world_size", "be >= 1", std::to_string(world_size));
  check_arg(rank >= 0 && rank < world_size, "make_nccl_communicator", "rank",
            "be in [0, " + std::to_string(world_size) + ")", std::to_string(rank));
  check_arg(device.is_cuda(), "make_nccl_communicator", "device", "be a CUDA device", device_name(device));
  LATTN_CUDA_CHECK(cudaSetDevice(device.index));
  ncclUniqueId id;
  std::memcpy(&id, id_bytes.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  nccl_check(nccl().comm_init_rank(&comm, world_size, id, rank), "ncclCommInitRank");
  return std::make_unique<NcclCommunicator>(comm, device, /*owned=*/true);
}

std::unique_ptr<Communicator> wrap_nccl_communicator(void* nccl_comm, Device device) {
  check_arg(nccl_comm != nullptr, "wrap_nccl_communicator", "nccl_comm", "be an ncclComm_t", "nullptr");
  check_arg(device.is_cuda(), "wrap_nccl_communicator", "device", "be a CUDA device", device_name(device));
  return std::make_unique<NcclCommunicator>(static_cast<ncclComm_t>(nccl_comm), device, /*owned=*/false);
}

}  // namespace lattn
#endif  // LATTN_WITH_NCCL
