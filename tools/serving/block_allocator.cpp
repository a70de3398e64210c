// The block allocator's free list.
#include "serving/block_allocator.h"

#include <stdexcept>
#include <string>

#include "serving/random.h"

namespace lattn::serving {

BlockAllocator::BlockAllocator(int32_t num_blocks, std::optional<uint64_t> shuffle_seed) {
  if (num_blocks < 1)
    throw std::invalid_argument("the cache needs at least 1 block, got " + std::to_string(num_blocks));
  allocated_.assign(size_t(num_blocks), false);
  free_list_.resize(size_t(num_blocks));
  // The stack pops from the back: store ids in reverse so block 0 comes first.
  for (int32_t i = 0; i < num_blocks; ++i) free_list_[size_t(i)] = num_blocks - 1 - i;
  if (shuffle_seed) {
    Rng rng(*shuffle_seed);
    for (size_t i = free_list_.size() - 1; i > 0; --i) {  // Fisher-Yates
      const size_t j = size_t(rng.next_u64() % (i + 1));
      std::swap(free_list_[i], free_list_[j]);
    }
  }
}

std::optional<std::vector<int32_t>> BlockAllocator::allocate(int32_t n) {
  if (n < 0) throw std::invalid_argument("cannot allocate a negative number of blocks (" + std::to_string(n) + ")");
  if (n > num_free()) return std::nullopt;
  std::vector<int32_t> blocks(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    blocks[size_t(i)] = free_list_.back();
    free_list_.pop_back();
    allocated_[size_t(blocks[size_t(i)])] = true;
  }
  if (num_used() > peak_used_) peak_used_ = num_used();
  return blocks;
}

void BlockAllocator::free(std::span<const int32_t> blocks) {
  // Validate everything first (a duplicate inside `blocks` counts as a double free).
  std::vector<bool> seen(allocated_.size(), false);
  for (const int32_t b : blocks) {
    if (b < 0 || b >= num_blocks()) {
      throw std::logic_error("block " + std::to_string(b) + " is not a block of this cache (0.." +
                             std::to_string(num_blocks() - 1) + ")");
    }
    if (!allocated_[size_t(b)] || seen[size_t(b)]) {
      throw std::logic_error("block " + std::to_string(b) + " is freed but is not allocated (double free)");
    }
    seen[size_t(b)] = true;
  }
  for (const int32_t b : blocks) {
    allocated_[size_t(b)] = false;
    free_list_.push_back(b);
  }
}

bool BlockAllocator::is_allocated(int32_t block) const {
  return block >= 0 && block < num_blocks() && allocated_[size_t(block)];
}

}  // namespace lattn::serving
