// The paged cache's block allocator: all-or-nothing allocation, a free list
// that never loses or duplicates a block, and refused double frees.
#include "serving/block_allocator.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "serving/random.h"

namespace lattn::serving {
namespace {

TEST(BlockAllocator, HandsOutEveryBlockOnceThenRefuses) {
  BlockAllocator allocator(10);
  auto first = allocator.allocate(4);
  auto second = allocator.allocate(6);
  ASSERT_TRUE(first && second);
  std::set<int32_t> ids(first->begin(), first->end());
  ids.insert(second->begin(), second->end());
  EXPECT_EQ(ids.size(), 10u);
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), 9);
  EXPECT_EQ(allocator.num_free(), 0);
  EXPECT_FALSE(allocator.allocate(1).has_value());
  EXPECT_EQ(allocator.peak_used(), 10);
}

TEST(BlockAllocator, AllocationIsAllOrNothing) {
  BlockAllocator allocator(8);
  ASSERT_TRUE(allocator.allocate(5));
  EXPECT_FALSE(allocator.allocate(4).has_value());  // 3 free: refuses and keeps them
  EXPECT_EQ(allocator.num_free(), 3);
  auto rest = allocator.allocate(3);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->size(), 3u);
  EXPECT_TRUE(allocator.allocate(0).has_value());  // nothing needed: always succeeds
}

TEST(BlockAllocator, FreedBlocksAreReused) {
  BlockAllocator allocator(4);
  auto a = allocator.allocate(4);
  ASSERT_TRUE(a);
  const std::vector<int32_t> returned = {(*a)[1], (*a)[3]};
  allocator.free(returned);
  EXPECT_EQ(allocator.num_free(), 2);
  EXPECT_FALSE(allocator.is_allocated(returned[0]));
  auto b = allocator.allocate(2);
  ASSERT_TRUE(b);
  EXPECT_EQ(std::set<int32_t>(b->begin(), b->end()), std::set<int32_t>(returned.begin(), returned.end()));
  EXPECT_EQ(allocator.peak_used(), 4);
}

TEST(BlockAllocator, RefusesDoubleFreeAndForeignIdsWithoutChangingAnything) {
  BlockAllocator allocator(4);
  auto a = allocator.allocate(2);
  ASSERT_TRUE(a);
  const int32_t block = (*a)[0];
  allocator.free(std::vector<int32_t>{block});
  EXPECT_THROW(allocator.free(std::vector<int32_t>{block}), std::logic_error);
  EXPECT_THROW(allocator.free(std::vector<int32_t>{(*a)[1], (*a)[1]}), std::logic_error);
  EXPECT_THROW(allocator.free(std::vector<int32_t>{4}), std::logic_error);
  EXPECT_THROW(allocator.free(std::vector<int32_t>{-1}), std::logic_error);
  EXPECT_EQ(allocator.num_free(), 3);  // the refused frees changed nothing
  EXPECT_TRUE(allocator.is_allocated((*a)[1]));
  EXPECT_THROW(BlockAllocator(0), std::invalid_argument);
  EXPECT_THROW(allocator.allocate(-1), std::invalid_argument);
}

TEST(BlockAllocator, ShuffledFreeListIsAPermutationAndSeeded) {
  BlockAllocator plain(64), shuffled(64, 7), again(64, 7), other(64, 8);
  auto p = plain.allocate(64), s = shuffled.allocate(64), s2 = again.allocate(64), o = other.allocate(64);
  ASSERT_TRUE(p && s && s2 && o);
  for (int32_t i = 0; i < 64; ++i) EXPECT_EQ((*p)[size_t(i)], i);
  EXPECT_EQ(*s, *s2);
  EXPECT_NE(*s, *o);
  EXPECT_NE(*s, *p);
  std::vector<int32_t> sorted = *s;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, *p);
}

// Random allocate/free traffic: the used count always equals what the
// holders hold, and no block is ever held twice.
TEST(BlockAllocator, RandomTrafficNeverLosesOrDuplicatesABlock) {
  BlockAllocator allocator(37, 3);
  Rng rng(11);
  std::vector<std::vector<int32_t>> holders;
  for (int step = 0; step < 5000; ++step) {
    if (holders.empty() || rng.next_u64() % 2 == 0) {
      const int32_t n = int32_t(rng.next_u64() % 6);
      const int32_t free_before = allocator.num_free();
      auto blocks = allocator.allocate(n);
      ASSERT_EQ(blocks.has_value(), n <= free_before);
      if (blocks) holders.push_back(*blocks);
    } else {
      const size_t i = size_t(rng.next_u64() % holders.size());
      allocator.free(holders[i]);
      holders.erase(holders.begin() + std::ptrdiff_t(i));
    }
    std::set<int32_t> held;
    size_t count = 0;
    for (const auto& h : holders) {
      held.insert(h.begin(), h.end());
      count += h.size();
    }
    ASSERT_EQ(held.size(), count) << "a block is held twice";
    ASSERT_EQ(int32_t(count), allocator.num_used());
    for (const int32_t b : held) ASSERT_TRUE(allocator.is_allocated(b));
  }
}

TEST(BlockAllocator, BlocksForTokensRoundsUp) {
  EXPECT_EQ(blocks_for_tokens(0, 16), 0);
  EXPECT_EQ(blocks_for_tokens(1, 16), 1);
  EXPECT_EQ(blocks_for_tokens(16, 16), 1);
  EXPECT_EQ(blocks_for_tokens(17, 16), 2);
  EXPECT_EQ(blocks_for_tokens(5, 1), 5);
}

}  // namespace
}  // namespace lattn::serving
