#include "support/dcp_ranks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "lattn/metadata.h"
#include "lattn/ops.h"
#include "support/gpu.h"
#include "support/test_data.h"

namespace lattn::test {

std::vector<std::unique_ptr<Communicator>> make_group(int world_size, Device device, bool nccl) {
  if (!nccl) return make_in_process_group(world_size, device);
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.push_back(make_nccl_communicator(nccl_unique_id(), 1, 0, device));
  return comms;
}

RankCache make_rank_cache(const DcpConfig& dcp, const std::vector<RankRequest>& reqs, const KvCacheSpec& spec,
                          Device device, uint64_t seed) {
  const int64_t bs = spec.block_size;
  std::vector<int64_t> blocks_of;
  int64_t blocks = 1;
  for (const RankRequest& r : reqs) {
    blocks_of.push_back((dcp_local_count(dcp, r.tokens) + bs - 1) / bs + 1);
    blocks += blocks_of.back();
  }
  RankCache rc;
  rc.cache = std::make_unique<OwnedLatentCache>(blocks, spec, device);
  poison(rc.cache->cache().data);
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 prng(seed);
  std::shuffle(ids.begin(), ids.end(), prng);
  size_t next = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const int ctx = reqs[i].context;
    std::vector<int32_t> table;
    for (int64_t b = 0; b < blocks_of[i]; ++b) table.push_back(ids[next++]);
    // The context positions this rank owns, at their local slots; the rest PAD.
    OwnedTensor slots = OwnedTensor::empty({std::max(ctx, 1)}, DType::i64);
    auto* s = slots.data_as<int64_t>();
    for (int64_t p = 0; p < slots.tensor().numel(); ++p) {
      s[p] = PAD_SLOT_ID;
      if (p >= ctx || dcp_owner(dcp, p) != dcp.rank) continue;
      const int64_t lp = dcp_local_position(dcp, p);
      s[p] = int64_t(table[size_t(lp / bs)]) * bs + lp % bs;
    }
    concat_and_cache_mla(*reqs[i].kv, *reqs[i].pe, *rc.cache, to_device(slots, device));
    rc.tables.push_back(std::move(table));
  }
  return rc;
}

void expect_ranks_match_one_rank(const std::vector<OwnedTensor>& results, int world_size) {
  const OwnedTensor single = to_host_f32(results[0]);
  double norm = 0;
  for (int64_t i = 0; i < single.tensor().numel(); ++i) {
    const double v = single.data_as<float>()[i];
    ASSERT_TRUE(std::isfinite(v)) << "single-rank output element " << i;
    norm += v * v;
  }
  ASSERT_GT(norm, 0.0);
  for (int r = 0; r < world_size; ++r) {
    const ErrorReport e = compare(results[size_t(1 + r)], results[0]);
    EXPECT_EQ(e.nan_mismatches, 0) << "rank " << r << ": " << e.str();
    EXPECT_LE(e.rel_l2, rel_tolerance(DType::bf16)) << "rank " << r << ": " << e.str();
  }
}

}  // namespace lattn::test
