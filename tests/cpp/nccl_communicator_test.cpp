// The NCCL communicator (lattn/communicator.h) on real GPUs: one thread per
// GPU of this machine (world size = GPU count, at most 4, or LATTN_NCCL_WORLD
// when set: scripts/gpu-check.sh runs 2 and 4 where there are GPUs), the collectives
// over device buffers checked element by element. Skips with one line where
// there is no GPU or no NCCL.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "lattn/communicator.h"
#include "lattn/device.h"
#include "lattn/errors.h"
#include "lattn/tensor.h"

namespace lattn {
namespace {

TEST(NcclCommunicator, CollectivesOverEveryGpu) {
  const int gpus = int(query_cuda_devices().devices.size());
  if (gpus == 0) GTEST_SKIP() << "no GPU test: no CUDA device";
  if (!nccl_available()) GTEST_SKIP() << "no NCCL test: libnccl.so.2 not loadable or lattn built without NCCL";
  const char* env = std::getenv("LATTN_NCCL_WORLD");
  const int world = env ? std::atoi(env) : std::min(gpus, 4);
  if (world < 1 || world > gpus) GTEST_SKIP() << "LATTN_NCCL_WORLD=" << world << " but " << gpus << " GPU(s)";
  const NcclUniqueIdBytes id = nccl_unique_id();  // made once, "sent" to every rank through memory
  const int64_t m = 1000;                         // elements per rank slice
  std::vector<std::string> failures;
  std::mutex failures_mutex;
  auto fail = [&](int r, const std::string& what) {
    std::lock_guard lock(failures_mutex);
    failures.push_back("rank " + std::to_string(r) + ": " + what);
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        const Device dev = Device::cuda(r);
        auto comm = make_nccl_communicator(id, world, r, dev);
        if (comm->rank() != r || comm->world_size() != world) fail(r, "rank/world mismatch");
        // send[i] = 1000 r + i (exact in f32)
        OwnedTensor host = OwnedTensor::empty({world * m}, DType::f32);
        for (int64_t i = 0; i < world * m; ++i) host.data_as<float>()[i] = float(1000 * r + i);
        OwnedTensor send = OwnedTensor::empty({world * m}, DType::f32, dev);
        copy_tensor(host, send);

        OwnedTensor gathered = OwnedTensor::empty({world, world * m}, DType::f32, dev);
        comm->all_gather(send, gathered);
        OwnedTensor g = OwnedTensor::empty({world, world * m}, DType::f32);
        copy_tensor(gathered, g);
        for (int s = 0; s < world; ++s)
          for (int64_t i = 0; i < world * m; ++i)
            if (g.data_as<float>()[s * world * m + i] != float(1000 * s + i)) {
              fail(r, "all_gather element " + std::to_string(i) + " of rank " + std::to_string(s));
              s = world;
              break;
            }

        OwnedTensor reduced = OwnedTensor::empty({m}, DType::f32, dev);
        comm->reduce_scatter_sum(send, reduced);
        OwnedTensor red = OwnedTensor::empty({m}, DType::f32);
        copy_tensor(reduced, red);
        for (int64_t i = 0; i < m; ++i) {
          float want = 0;
          for (int s = 0; s < world; ++s) want += float(1000 * s + r * m + i);
          if (red.data_as<float>()[i] != want) {
            fail(r, "reduce_scatter_sum element " + std::to_string(i));
            break;
          }
        }

        OwnedTensor exchanged = OwnedTensor::empty({world * m}, DType::f32, dev);
        comm->all_to_all(send, exchanged);
        OwnedTensor ex = OwnedTensor::empty({world * m}, DType::f32);
        copy_tensor(exchanged, ex);
        for (int s = 0; s < world; ++s)
          for (int64_t i = 0; i < m; ++i)
            if (ex.data_as<float>()[s * m + i] != float(1000 * s + r * m + i)) {
              fail(r, "all_to_all element " + std::to_string(i) + " from rank " + std::to_string(s));
              s = world;
              break;
            }
        comm->barrier();
      } catch (const std::exception& e) {
        fail(r, e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  std::printf("NCCL collectives checked on %d GPU(s)\n", world);
}

}  // namespace
}  // namespace lattn
