// src/cuda/smxx/batch_invariant_split.h — the split-KV size of the
// batch-invariant decode (docs/mla.md, "Batch invariance"): a function of the
// request's own key count and of a rule fixed by the kernel's tiles (so by
// the head count and the model dims, never by the batch), so a request is cut
// at the same keys and its parts are merged in the same order whatever else
// is in the batch.
//
// Why a function of the length and not one fixed size: a fixed 512-key split
// leaves a short request in one CTA that walks all its keys alone (1.4-1.7x
// the default plan on an H100, docs/perf.md), while a small fixed split
// multiplies the f32 partial results of long requests. The split grows with
// the square root of the length: a request of `tiles` key tiles gets the
// largest power of two s with 2^rule s^2 <= tiles (at least 1). Rule 2
// (4 s^2 <= tiles):
//   tiles  < 16   (1024 keys of 64):  1-tile splits, one part per tile
//   tiles  < 64   (4096 keys):        2-tile splits,  8-31 parts
//   tiles  < 256  (16384 keys):       4-tile splits, 16-63 parts
//   tiles  < 1024 (65536 keys):       8-tile splits, 32-127 parts
// i.e. between 2 sqrt(tiles) and 4 sqrt(tiles) parts; under rule r between
// sqrt(2^r tiles) and 2 sqrt(2^r tiles). A larger rule cuts finer (rule 4:
// 1-tile splits up to 63 tiles, then 2-tile splits up to 255), a smaller one
// coarser (rule 0: s^2 <= tiles, 8-tile splits from 64 tiles). The decode
// picks the rule from its tiles (cuda_decode_backend.cpp): kernels that fold
// a request's splits in one CTA (no partials when the batch is large) cut
// finer, kernels whose every split writes rows x L f32 partials cut coarser
// when a split's partials are large against its keys (many heads).
#pragma once

#if defined(__CUDACC__)
#define LATTN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LATTN_HOST_DEVICE inline
#endif

namespace lattn::cuda {

// The rule of the original length-only split (4 s^2 <= tiles).
constexpr int kBatchInvariantDefaultSplitRule = 2;
// Rules the kernels accept (2^rule s^2 <= tiles).
constexpr int kBatchInvariantMinSplitRule = -2, kBatchInvariantMaxSplitRule = 6;

// Key tiles per split for a request of `tiles` key tiles (tiles >= 0) under
// `rule` (kBatchInvariantMinSplitRule..kBatchInvariantMaxSplitRule).
LATTN_HOST_DEVICE constexpr int batch_invariant_split_tiles(int tiles, int rule = kBatchInvariantDefaultSplitRule) {
  int s = 1;
  // 2^rule (2s)^2 <= tiles, written without overflow for any int tiles
  // (s <= 16384: 4 s^2 < 2^31 / 2^4).
  if (rule >= 0) {
    while (2 * s <= 16384 && (4LL * s * s << rule) <= tiles) s *= 2;
  } else {
    while (2 * s <= 16384 && 4LL * s * s <= (static_cast<long long>(tiles) << -rule)) s *= 2;
  }
  return s;
}

// Parts (splits) of a request of `tiles` key tiles; 0 when it has no keys.
LATTN_HOST_DEVICE constexpr int batch_invariant_num_splits(int tiles, int rule = kBatchInvariantDefaultSplitRule) {
  if (tiles <= 0) return 0;
  const int s = batch_invariant_split_tiles(tiles, rule);
  return (tiles + s - 1) / s;
}

// The key tiles [begin, end) of splits [first, last) of a request of `tiles`
// tiles (one split: last = first + 1).
LATTN_HOST_DEVICE constexpr void batch_invariant_splits_range(int tiles, int first, int last, int rule, int& begin,
                                                              int& end) {
  const int s = batch_invariant_split_tiles(tiles, rule);
  begin = first * s;
  end = last * s < tiles ? last * s : tiles;
}

// The key tiles [begin, end) of split `index` of a request of `tiles` tiles.
LATTN_HOST_DEVICE constexpr void batch_invariant_split_range(int tiles, int index, int& begin, int& end,
                                                             int rule = kBatchInvariantDefaultSplitRule) {
  batch_invariant_splits_range(tiles, index, index + 1, rule, begin, end);
}

}  // namespace lattn::cuda

#undef LATTN_HOST_DEVICE
