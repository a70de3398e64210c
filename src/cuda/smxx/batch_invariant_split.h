// src/cuda/smxx/batch_invariant_split.h — the split-KV size of the
// batch-invariant decode (docs/mla.md, "Batch invariance"): a function of the
// request's own key count only, so a request is cut at the same keys and its
// parts are combined in the same order whatever else is in the batch.
//
// Why a function of the length and not one fixed size: a fixed 512-key split
// leaves a short request in one CTA that walks all its keys alone (1.4-1.7x
// the default plan on an H100, docs/perf.md), while a small fixed split
// multiplies the f32 partial results of long requests at large batches. The
// split grows with the square root of the length: a request of `tiles` key
// tiles gets the largest power of two s with 4 s^2 <= tiles (at least 1), so
//   tiles  < 16   (1024 keys of 64):  1-tile splits, one part per tile
//   tiles  < 64   (4096 keys):        2-tile splits,  8-31 parts
//   tiles  < 256  (16384 keys):       4-tile splits, 16-63 parts
//   tiles  < 1024 (65536 keys):       8-tile splits, 32-127 parts
// i.e. between 2 sqrt(tiles) and 4 sqrt(tiles) parts: enough to spread a long
// request over the SMs, few enough that the partials stay a small fraction of
// the keys read (a part reads s tiles of keys and writes one row block of
// f32 partials).
#pragma once

#if defined(__CUDACC__)
#define LATTN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LATTN_HOST_DEVICE inline
#endif

namespace lattn::cuda {

// Key tiles per split for a request of `tiles` key tiles (tiles >= 0).
LATTN_HOST_DEVICE constexpr int batch_invariant_split_tiles(int tiles) {
  int s = 1;
  // 4 (2s)^2 <= tiles, written without overflow for any int tiles.
  while (2 * s <= 16384 && 16 * s * s <= tiles) s *= 2;
  return s;
}

// Parts (splits) of a request of `tiles` key tiles; 0 when it has no keys.
LATTN_HOST_DEVICE constexpr int batch_invariant_num_splits(int tiles) {
  if (tiles <= 0) return 0;
  const int s = batch_invariant_split_tiles(tiles);
  return (tiles + s - 1) / s;
}

// The key tiles [begin, end) of split `index` of a request of `tiles` tiles.
LATTN_HOST_DEVICE constexpr void batch_invariant_split_range(int tiles, int index, int& begin, int& end) {
  const int s = batch_invariant_split_tiles(tiles);
  begin = index * s;
  end = begin + s < tiles ? begin + s : tiles;
}

}  // namespace lattn::cuda

#undef LATTN_HOST_DEVICE
