// tools/serving/block_allocator.h — hands out the blocks of a paged latent
// cache (the same block ids in every layer's cache, as vLLM's block manager).
//
// A free list of block ids. Allocation is all-or-nothing: a request that
// cannot get every block it asks for gets none and waits; freeing returns
// blocks for reuse. The initial order of the free list is a seeded
// permutation, so block tables are scattered over the cache the way they are
// after a server has run for a while (and kernels that assume contiguous
// blocks fail).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace lattn::serving {

class BlockAllocator {
 public:
  // num_blocks >= 1. shuffle_seed: permutes the free list (nullopt: ids in order 0, 1, ...).
  explicit BlockAllocator(int32_t num_blocks, std::optional<uint64_t> shuffle_seed = std::nullopt);

  // n blocks (n >= 0), or nullopt (and nothing allocated) when fewer than n are free.
  std::optional<std::vector<int32_t>> allocate(int32_t n);
  // Returns blocks to the free list. Throws std::logic_error (and frees
  // nothing) for an id out of range or not currently allocated: a double free
  // is a bug in the caller that must not corrupt the list.
  void free(std::span<const int32_t> blocks);

  int32_t num_blocks() const { return int32_t(allocated_.size()); }
  int32_t num_free() const { return int32_t(free_list_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }
  int32_t peak_used() const { return peak_used_; }
  bool is_allocated(int32_t block) const;

 private:
  std::vector<int32_t> free_list_;  // a stack: the most recently freed block is reused first
  std::vector<bool> allocated_;     // [num_blocks]
  int32_t peak_used_ = 0;
};

// Blocks needed to hold `tokens` tokens (ceil division), for tokens >= 0.
// 64-bit: with block size 1 a token count near 2^31 needs as many blocks.
inline int64_t blocks_for_tokens(int64_t tokens, int32_t block_size) { return (tokens + block_size - 1) / block_size; }

}  // namespace lattn::serving
