// Device-resident indices the host cannot check before a launch (slot
// mappings, block tables on the GPU): the kernels bound-check every id they
// follow, never touch memory outside the cache (guard blocks around the
// cache stay intact), and the violation becomes a ValueError — naming the
// argument right after the launch with LATTN_CHECK_INDICES=1, or at the next
// CUDA op on the device without it (cuda/common/index_check.h,
// docs/reliability.md). Skips without a GPU; run it under
// `compute-sanitizer --tool memcheck` too (scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/ops/device_ops.h"
#include "lattn/cache.h"
#include "lattn/errors.h"
#include "lattn/ops.h"
#include "lattn/registry.h"
#include "lattn/tensor.h"
#include "support/backend_driver.h"
#include "support/gpu.h"
#include "support/scoped_env.h"

namespace lattn {
namespace {

const Device kGpu = Device::cuda(0);
constexpr uint8_t kGuard = 0xab;

// Sets (on) or unsets (off) LATTN_CHECK_INDICES for one test and restores it.
class CheckIndices : public test::ScopedEnv {
 public:
  explicit CheckIndices(bool on) : ScopedEnv("LATTN_CHECK_INDICES", on ? "1" : nullptr) {}
};

std::vector<uint8_t> host_bytes(const Tensor& t) {
  OwnedTensor host = OwnedTensor::empty(t.shape(), t.dtype());
  copy_tensor(t, host.tensor());
  const auto* p = static_cast<const uint8_t*>(host.data());
  return std::vector<uint8_t>(p, p + host.tensor().nbytes());
}

OwnedTensor device_i64(const std::vector<int64_t>& v) {
  OwnedTensor host = OwnedTensor::empty({int64_t(v.size())}, DType::i64);
  std::memcpy(host.data(), v.data(), v.size() * 8);
  return test::to_device(host.tensor());
}

OwnedTensor device_i32(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  OwnedTensor host = OwnedTensor::empty(shape, DType::i32);
  std::memcpy(host.data(), v.data(), v.size() * 4);
  return test::to_device(host.tensor());
}

// A cache of blocks [1, 1 + num_blocks) of a larger device buffer; blocks 0
// and num_blocks + 1 are guards filled with kGuard (they must stay so).
struct GuardedCache {
  GuardedCache(int64_t num_blocks, int64_t block_size, int L, int R)
      : storage(OwnedTensor::empty({num_blocks + 2, block_size, int64_t(L + R)}, DType::bf16, kGpu)) {
    fill_bytes(storage.tensor(), kGuard);
    cache = LatentCache{storage.tensor().narrow(0, 1, num_blocks), L, R, 1.f};
  }
  bool guards_intact() const {
    const int64_t last = storage.tensor().size(0) - 1;
    for (const int64_t b : {int64_t(0), last}) {
      for (uint8_t byte : host_bytes(storage.tensor().narrow(0, b, 1))) {
        if (byte != kGuard) return false;
      }
    }
    return true;
  }
  OwnedTensor storage;
  LatentCache cache;
};

TEST(CudaIndexCheck, ConcatRefusesDeviceSlotsPastTheCacheAndWritesNothingOutside) {
  LATTN_REQUIRE_GPU();
  const int L = 64, R = 16, T = 4;
  GuardedCache g(/*num_blocks=*/4, /*block_size=*/4, L, R);  // 16 slots
  OwnedTensor kv = OwnedTensor::empty({T, L}, DType::bf16, kGpu), pe = OwnedTensor::empty({T, R}, DType::bf16, kGpu);
  fill(kv.tensor(), 1.f);
  fill(pe.tensor(), 2.f);
  const OwnedTensor slots = device_i64({0, 16, 1000000, 5});  // 16 and 10^6 are past the cache
  {
    const CheckIndices on(true);
    try {
      concat_and_cache_mla(kv.tensor(), pe.tensor(), g.cache, slots.tensor());
      FAIL() << "no ValueError for a device slot past the cache";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("argument 'slot_mapping' must hold slots < num_blocks * block_size = 16"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_TRUE(g.guards_intact());
  // Without LATTN_CHECK_INDICES the next CUDA op on the device reports it.
  {
    const CheckIndices off(false);
    concat_and_cache_mla(kv.tensor(), pe.tensor(), g.cache, slots.tensor());
    (void)host_bytes(g.storage.tensor());  // a synchronous copy: the kernel has finished
    EXPECT_THROW(concat_and_cache_mla(kv.tensor(), pe.tensor(), g.cache, device_i64({0}).tensor()), ValueError);
    // Reported once: the next call runs.
    EXPECT_NO_THROW(concat_and_cache_mla(kv.tensor(), pe.tensor(), g.cache, device_i64({0}).tensor()));
  }
  EXPECT_TRUE(g.guards_intact());
}

TEST(CudaIndexCheck, GatherRefusesDeviceBlockIdsOutsideTheCache) {
  LATTN_REQUIRE_GPU();
  const CheckIndices on(true);
  const int L = 64, R = 16;
  GuardedCache g(/*num_blocks=*/4, /*block_size=*/4, L, R);
  OwnedTensor dst = OwnedTensor::empty({8, L + R}, DType::bf16, kGpu);
  for (const std::vector<int32_t>& table :
       {std::vector<int32_t>{1, 4}, std::vector<int32_t>{-1, 0}, std::vector<int32_t>{2, 1 << 30}}) {
    const OwnedTensor bt = device_i32(table, {1, 2});
    const OwnedTensor cu = device_i32({0, 8}, {2});
    try {
      gather_cache(g.cache, dst.tensor(), bt.tensor(), cu.tensor(), 1, Tensor());
      FAIL() << "no ValueError for block table " << table[0] << ", " << table[1];
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("argument 'block_table' must hold block ids in [0, num_blocks = 4)"),
                std::string::npos)
          << e.what();
    }
  }
  // A sequence longer than its table row (8 tokens need 2 columns of block size 4; the row has 1).
  const OwnedTensor narrow_table = device_i32({0}, {1, 1});
  const OwnedTensor cu = device_i32({0, 8}, {2});
  EXPECT_THROW(gather_cache(g.cache, dst.tensor(), narrow_table.tensor(), cu.tensor(), 1, Tensor()), ValueError);
  // cu_seq_lens past dst's rows.
  const OwnedTensor table = device_i32({0, 1, 2, 3}, {1, 4});
  const OwnedTensor long_cu = device_i32({0, 16}, {2});
  EXPECT_THROW(gather_cache(g.cache, dst.tensor(), table.tensor(), long_cu.tensor(), 1, Tensor()), ValueError);
  EXPECT_TRUE(g.guards_intact());
}

TEST(CudaIndexCheck, DecodeRefusesDeviceBlockIdsOutsideTheCache) {
  LATTN_REQUIRE_GPU();
  const CheckIndices on(true);
  test::BackendCase c;
  c.name = "decode with a corrupted device block table";
  c.dims = MlaDims::deepseek_v3(16);
  c.block_size = 16;
  c.decodes = {{40, 1}, {70, 1}};
  test::PreparedStep step(c, "cuda", "cuda", kGpu);
  // The host copies (what forward validates) stay right; the device table gets an id past the cache.
  MlaMetadata& md = step.metadata();
  const Tensor& table = md.block_table;
  std::vector<int32_t> bad(size_t(table.numel()), int32_t(step.cache().num_blocks() + 7));
  OwnedTensor host = OwnedTensor::empty(table.shape(), DType::i32);
  std::memcpy(host.data(), bad.data(), bad.size() * 4);
  copy_tensor(host.tensor(), table);
  try {
    step.forward();
    FAIL() << "no ValueError for device block ids past the cache";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("argument 'block_table' must hold block ids in [0, num_blocks"),
              std::string::npos)
        << e.what();
  }
}

// advance_step's device seq_lens and block tables: a new position whose
// column is past the table's width (the kernel used to read past the table:
// memcheck flags it) or whose block id is negative gets slot PAD, keeps its
// seq_len, and is a ValueError naming 'block_tables'; good rows advance.
TEST(CudaIndexCheck, AdvanceStepNeverReadsPastTheBlockTable) {
  LATTN_REQUIRE_GPU();
  const int num_seqs = 3, block_size = 4, width = 2;  // a row covers positions [0, 8)
  const auto advance = [&](const std::vector<int32_t>& lens, const std::vector<int32_t>& table, bool check) {
    const CheckIndices mode(check);
    OwnedTensor tok = device_i64({9, 9, 9}), pos = device_i64({9, 9, 9}), slots = device_i64({9, 9, 9});
    OwnedTensor sampled = device_i64({11, 12, 13});
    OwnedTensor sl = device_i32(lens, {num_seqs}), bt = device_i32(table, {num_seqs, width});
    std::string error;
    try {
      detail::cuda_device_ops().advance_step(num_seqs, num_seqs, block_size, tok.tensor(), sampled.tensor(),
                                             pos.tensor(), sl.tensor(), slots.tensor(), bt.tensor(), nullptr);
      (void)host_bytes(sl.tensor());  // synchronous: the kernel has finished
    } catch (const ValueError& e) {
      error = e.what();
    }
    const std::vector<uint8_t> s = host_bytes(slots.tensor()), l = host_bytes(sl.tensor());
    std::vector<int64_t> got_slots(num_seqs);
    std::vector<int32_t> got_lens(num_seqs);
    std::memcpy(got_slots.data(), s.data(), s.size());
    std::memcpy(got_lens.data(), l.data(), l.size());
    return std::make_tuple(error, got_slots, got_lens);
  };
  // Row 2's position 1000000 needs column 250000 of a 2-column table (the last row of the allocation).
  {
    const auto [error, slots, lens] = advance({5, 2, 1000000}, {7, 8, 3, 4, 5, 6}, true);
    EXPECT_NE(error.find("advance_step: argument 'block_tables' must hold"), std::string::npos) << error;
    EXPECT_EQ(slots, (std::vector<int64_t>{8 * 4 + 1, 3 * 4 + 2, -1}));
    EXPECT_EQ(lens, (std::vector<int32_t>{6, 3, 1000000}));
  }
  // A negative seq_len and a negative block id.
  {
    const auto [error, slots, lens] = advance({-5, 2, 0}, {7, 8, -3, 4, 5, 6}, true);
    EXPECT_NE(error.find("argument 'block_tables'"), std::string::npos) << error;
    EXPECT_EQ(slots, (std::vector<int64_t>{-1, -1, 5 * 4}));
    EXPECT_EQ(lens, (std::vector<int32_t>{-5, 2, 1}));
  }
  // Without LATTN_CHECK_INDICES the next CUDA op on the device reports it, once.
  {
    const auto [error, slots, lens] = advance({5, 2, 8}, {7, 8, 3, 4, 5, 6}, false);
    EXPECT_EQ(error, "");
    EXPECT_EQ(slots[2], -1);
    const auto [next, s2, l2] = advance({0, 0, 0}, {7, 8, 3, 4, 5, 6}, false);
    EXPECT_NE(next.find("an earlier call on cuda:0 followed a sequence longer than its block-table row"),
              std::string::npos)
        << next;
    const auto [after, s3, l3] = advance({0, 0, 0}, {7, 8, 3, 4, 5, 6}, false);
    EXPECT_EQ(after, "");
    EXPECT_EQ(s3, (std::vector<int64_t>{28, 12, 20}));
  }
  // Sizes the host sees are checked before the launch.
  OwnedTensor small = device_i64({0}), bt = device_i32({0, 0}, {1, 2}), sl = device_i32({0}, {1});
  EXPECT_THROW(detail::cuda_device_ops().advance_step(2, 2, block_size, small.tensor(), small.tensor(), small.tensor(),
                                                      sl.tensor(), small.tensor(), bt.tensor(), nullptr),
               ValueError);
}

// The same through the `hopper` backend's wgmma kernel (H128, pages of 64:
// the bulk tensor copies are aimed at a page outside the tensor map, which
// the copy engine fills with zeros, and the bad id is recorded), with ids
// past the cache, negative ids, and an odd number of tiles (a lone last tile).
TEST(CudaIndexCheck, HopperDecodeRefusesDeviceBlockIdsOutsideTheCache) {
  LATTN_REQUIRE_GPU();
  const auto cls = mla_decode_backend_registry().get_class("hopper");
  if (!cls->is_available() || !cls->supports_compute_capability(device_capability(0))) {
    GTEST_SKIP() << "hopper decode does not run here (sm90 with sm_90a code only)";
  }
  const CheckIndices on(true);
  for (const int32_t bad_id : {-1, -100, 1 << 20}) {
    test::BackendCase c;
    c.name = "hopper decode with a corrupted device block table";
    c.dims = MlaDims::deepseek_v3(128);
    c.block_size = 64;
    c.decodes = {{40, 1}, {200, 1}};  // 1 and 4 tiles of 64 keys
    test::PreparedStep step(c, "cuda", "hopper", kGpu);
    MlaMetadata& md = step.metadata();
    const Tensor& table = md.block_table;
    OwnedTensor host = OwnedTensor::empty(table.shape(), DType::i32);
    copy_tensor(table, host.tensor());
    int32_t* ids = static_cast<int32_t*>(host.data());
    ids[table.stride(0) * 1 + 2] =
        bad_id < 0 ? bad_id : int32_t(step.cache().num_blocks() + bad_id);  // request 1, keys 128..191
    copy_tensor(host.tensor(), table);
    try {
      step.forward();
      FAIL() << "no ValueError for device block id " << ids[table.stride(0) + 2];
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("argument 'block_table' must hold block ids in [0, num_blocks"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace lattn
