// src/cuda/sm80/sparse/sparse_mla_mma.cuh — sparse absorbed MLA on tensor cores
// (mma.sync, ldmatrix, cp.async: sm80 and later, Hopper included).
//
// A CTA owns kBlockM heads (rows) of one token t and walks the token's index
// row in tiles of kBlockN entries. Per tile:
//   1. warp 0 compacts the tile's valid slots (0 <= slot < num_slots; -1 and
//      out-of-range entries dropped, duplicates kept) into a ring of 16-byte
//      cache offsets, two tiles ahead of their use;
//   2. every thread gathers the compacted rows with cp.async into shared
//      memory — bf16: straight into a double-buffered K tile; fp8_ds_mla: the
//      656-byte rows into one staging tile, dequantized (fp8 · tile scale,
//      rounded to bf16, as the host does) into the K tile — rows past the
//      tile's count are zero-filled, so a stale or poisoned row never meets a
//      probability of 0 (0 · NaN is NaN in the tensor-core product);
//   3. S = Q Kᵀ, online softmax and O += P V with the dense decode kernel's
//      stages (sm80/decode/decode_mainloop.cuh), keys past the tile's count
//      masked as a sequence end is. The key set is the same for every row of
//      the CTA, so compacting changes only the order in which keys are summed.
// A tile with no valid slot is skipped. The epilogue writes out = O / l,
// times 1 / (1 + exp(sink - lse)) with a sink, and lse = ln Σ exp(s) (−inf
// and output 0 for a row without keys; NaN scores make the row NaN through
// update_softmax's NaN-propagating max). docs/sparse.md describes it.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/sm80/decode/decode_kernel.cuh"
#include "cuda/smxx/sparse_mla_params.h"

namespace lattn::cuda::sm80 {

constexpr int kDsMlaRowBytes = 656;                      // 512 fp8 + 4 f32 scales + 64 bf16 (L = 512, R = 64)
constexpr int kDsMlaRowChunks = kDsMlaRowBytes / 16;     // 41 cp.async chunks per row
constexpr int kDsMlaScalesAt = 512, kDsMlaRopeAt = 528;  // byte offsets in a row

// The dense decode traits give the warp layout (DecodeTraits, 2 stages, bf16);
// the shared-memory layout differs: fp8_ds_mla rows are 656 bytes and the
// slot ring of step 1 is added.
template <int kBlockM_, int kBlockN_, int kWarps_, bool kDsMla_>
struct SparseTraits : DecodeTraits<kBlockM_, kBlockN_, kWarps_, 2, __nv_bfloat16, __nv_bfloat16> {
  using Base = DecodeTraits<kBlockM_, kBlockN_, kWarps_, 2, __nv_bfloat16, __nv_bfloat16>;
  static constexpr bool kDsMla = kDsMla_;
  static constexpr int kRing = 3;  // slot lists: the tile computed, the one loading, the one compacted
  static constexpr int kKTiles = kDsMla ? 1 : 2;
  static constexpr size_t kQBytes = size_t(kBlockM_) * Base::kD * 2;
  static constexpr size_t kKBytes = size_t(kKTiles) * kBlockN_ * Base::kD * 2;
  static constexpr size_t kStagingBytes = kDsMla ? size_t(kBlockN_) * kDsMlaRowBytes : 0;
  static constexpr size_t kSlotBytes = size_t(kRing) * kBlockN_ * 4 + 16;  // + kRing counts
  static constexpr size_t kSmemBytes =
      kQBytes + kKBytes + kStagingBytes + Base::kPBytes + Base::kReduceBytes + Base::kRowVecBytes + kSlotBytes;
  static_assert(kBlockN_ % 32 == 0, "index tiles are read a warp-width at a time");
};

// Raw indices of index tile `tile` (lane's kBlockN / 32 of them; -1 past topk).
template <class K>
__device__ __forceinline__ void fetch_indices(const SparseParams& p, const int32_t* idx, int tile,
                                              int32_t (&raw)[K::kBlockN / 32]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < K::kBlockN / 32; ++i) {
    const int j = tile * K::kBlockN + i * 32 + lane;
    raw[i] = j < p.topk ? __ldg(idx + j) : -1;
  }
}

// One warp: the valid slots of `raw`, in order, as cache offsets in 16-byte
// units, and their count.
template <class K>
__device__ __forceinline__ void compact_slots(const SparseParams& p, const int32_t (&raw)[K::kBlockN / 32],
                                              uint32_t* slots, int* count) {
  const int lane = threadIdx.x % 32;
  const int block_size = int(p.block_size);
  const int64_t block16 = p.block_stride_bytes / 16, entry16 = p.entry_stride_bytes / 16;
  int n = 0;
#pragma unroll
  for (int i = 0; i < K::kBlockN / 32; ++i) {
    const int32_t s = raw[i];
    const bool ok = s >= 0 && s < p.num_slots;
    const unsigned ballot = __ballot_sync(0xffffffffu, ok);
    if (ok)
      slots[n + __popc(ballot & ((1u << lane) - 1u))] =
          uint32_t((s / block_size) * block16 + (s % block_size) * entry16);
    n += __popc(ballot);
  }
  if (lane == 0) *count = n;
}

// Q tile [kBlockM][kD] (swizzled) <- heads h0.. of token t; heads >= N are 0.
template <class K>
__device__ __forceinline__ void load_q_rows(const SparseParams& p, int t, int h0, __nv_bfloat16* q_smem) {
  using T = __nv_bfloat16;
  const T* q = static_cast<const T*>(p.q);
  const bool vec = reinterpret_cast<uintptr_t>(q) % 16 == 0 && p.q_stride_t % 8 == 0 && p.q_stride_h % 8 == 0;
  for (int c = threadIdx.x; c < K::kBlockM * K::kChunksPerRow; c += K::kThreads) {
    const int row = c / K::kChunksPerRow, chunk = c % K::kChunksPerRow;
    const int h = h0 + row;
    const bool valid = h < p.N;
    const T* src = q + int64_t(t) * p.q_stride_t + int64_t(valid ? h : 0) * p.q_stride_h + chunk * 8;
    T* dst = q_smem + swizzle<K::kD>(row, chunk * 8);
    if (vec) {
      cp_async_16(smem_addr(dst), valid ? src : q, valid ? 16 : 0);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[i] = valid ? src[i] : T(0.f);
    }
  }
}

// Starts the gather of one tile's `count` compacted rows into `dst` (bf16:
// the swizzled K tile; fp8_ds_mla: the raw staging tile); rows past count are
// zero-filled.
template <class K>
__device__ __forceinline__ void load_rows(const SparseParams& p, const uint32_t* slots, int count, void* dst) {
  constexpr int kChunks = K::kDsMla ? kDsMlaRowChunks : K::kChunksPerRow;
  for (int c = threadIdx.x; c < K::kBlockN * kChunks; c += K::kThreads) {
    const int row = c / kChunks, chunk = c % kChunks;
    const bool valid = row < count;
    const uint8_t* src = p.cache + (valid ? int64_t(slots[row]) * 16 + chunk * 16 : 0);
    uint32_t d;
    if constexpr (K::kDsMla) {
      d = smem_addr(static_cast<uint8_t*>(dst) + row * kDsMlaRowBytes + chunk * 16);
    } else {
      d = smem_addr(static_cast<__nv_bfloat16*>(dst) + swizzle<K::kD>(row, chunk * 8));
    }
    cp_async_16(d, src, valid ? 16 : 0);
  }
}

// fp8_ds_mla staging rows -> swizzled bf16 K tile: latent = fp8 · its tile's
// scale rounded to bf16 (fp8 -> half is exact), rope copied.
template <class K>
__device__ __forceinline__ void convert_ds_mla_tile(const uint8_t* staging, __nv_bfloat16* k_smem) {
  using T = __nv_bfloat16;
#pragma unroll 1
  for (int c = threadIdx.x; c < K::kBlockN * K::kChunksPerRow; c += K::kThreads) {
    const int row = c / K::kChunksPerRow, chunk = c % K::kChunksPerRow;
    const uint8_t* e = staging + row * kDsMlaRowBytes;
    uint4 packed;
    if (chunk < K::kL / 8) {
      const uint2 raw = *reinterpret_cast<const uint2*>(e + chunk * 8);
      const float sc = reinterpret_cast<const float*>(e + kDsMlaScalesAt)[chunk / 16];
      const __nv_fp8x2_storage_t* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&raw);
      uint32_t* words = reinterpret_cast<uint32_t*>(&packed);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3)));
        words[i] = pack2<T>(f.x * sc, f.y * sc);
      }
    } else {
      packed = *reinterpret_cast<const uint4*>(e + kDsMlaRopeAt + (chunk - K::kL / 8) * 16);
    }
    *reinterpret_cast<uint4*>(k_smem + swizzle<K::kD>(row, chunk * 8)) = packed;
  }
}

// The epilogue (sm80/decode/decode_epilogue.cuh's write_rows) for heads
// [h0, +kBlockM) of token t: out = O / l, times 1 / (1 + exp(sink - lse))
// with a sink, and the natural-log LSE.
template <class K>
__device__ __forceinline__ void write_sparse_out(const SparseParams& p, int t, int h0, const SoftmaxState& st,
                                                 const float (&o)[K::kMTiles][K::kNTilesO][4], float* reduce,
                                                 float* row_vec) {
  using T = __nv_bfloat16;
  T* out_base = static_cast<T*>(p.out) + int64_t(t) * p.out_stride_t;
  const bool vec = reinterpret_cast<uintptr_t>(out_base) % 4 == 0 && p.out_stride_h % 2 == 0;
  const auto factor = [&](int row, float l, float lse) {
    const float inv = 1.f / l;
    const int h = h0 + row;  // a padding row (h >= N) has no sink
    return p.sink && h < p.N ? inv / (1.f + expf(p.sink[h * p.sink_stride] - lse)) : inv;
  };
  const auto store_row = [&](int row, int col0, auto pair) {
    T* out = out_base + int64_t(h0 + row) * p.out_stride_h + col0;
#pragma unroll
    for (int ni = 0; ni < K::kNTilesO; ++ni) {
      const float2 v = pair(ni);
      if (vec) {
        *reinterpret_cast<uint32_t*>(out + ni * 8) = pack2<T>(v.x, v.y);
      } else {
        out[ni * 8] = __float2bfloat16_rn(v.x);
        out[ni * 8 + 1] = __float2bfloat16_rn(v.y);
      }
    }
  };
  const auto store_lse = [&](int row, float lse) {
    if (p.lse) p.lse[(h0 + row) * p.lse_stride_h + int64_t(t) * p.lse_stride_t] = lse;
  };
  write_rows<K>(st, o, p.N - h0, reduce, row_vec, factor, store_row, store_lse);
}

template <class K>
__device__ __forceinline__ void sparse_mla_mma_body(const SparseParams& p) {
  using T = __nv_bfloat16;
  extern __shared__ __align__(128) char smem[];
  T* q_smem = reinterpret_cast<T*>(smem);
  T* k_smem = reinterpret_cast<T*>(smem + K::kQBytes);
  uint8_t* staging = reinterpret_cast<uint8_t*>(smem + K::kQBytes + K::kKBytes);
  T* p_smem = reinterpret_cast<T*>(staging + K::kStagingBytes);
  float* reduce = reinterpret_cast<float*>(reinterpret_cast<char*>(p_smem) + K::kPBytes);
  float* row_vec = reduce + K::kColGroups * K::kBlockM;
  uint32_t* slots = reinterpret_cast<uint32_t*>(row_vec + 2 * K::kBlockM);  // [kRing][kBlockN]
  int* counts = reinterpret_cast<int*>(slots + K::kRing * K::kBlockN);      // [kRing]
  constexpr int kTileElems = K::kBlockN * K::kD;

  // CTA = (head tile x, token y + 65535 z): head tiles fastest, so the CTAs
  // that gather the same rows run at the same time and share them through L2.
  const int t = int(blockIdx.z * 65535u + blockIdx.y), h0 = int(blockIdx.x) * K::kBlockM;
  if (t >= p.T) return;  // the last z slice is partial (the whole CTA leaves)
  const int warp = threadIdx.x / 32;
  const int rg = warp % K::kRowGroups, cg = warp / K::kRowGroups;
  const int32_t* idx = p.indices + int64_t(t) * p.idx_stride;
  const int n_tiles = (p.topk + K::kBlockN - 1) / K::kBlockN;

  // Prologue: slot lists of tiles 0 and 1, Q and tile 0.
  int32_t raw[K::kBlockN / 32];
  if (warp == 0) {
    fetch_indices<K>(p, idx, 0, raw);
    compact_slots<K>(p, raw, slots, counts);
    fetch_indices<K>(p, idx, 1, raw);
    compact_slots<K>(p, raw, slots + K::kBlockN, counts + 1);
  }
  load_q_rows<K>(p, t, h0, q_smem);
  __syncthreads();
  load_rows<K>(p, slots, counts[0], K::kDsMla ? static_cast<void*>(staging) : static_cast<void*>(k_smem));
  cp_async_commit();

  SoftmaxState st{{-INFINITY, -INFINITY}, {0.f, 0.f}};
  float o[K::kMTiles][K::kNTilesO][4];
  zero_o<K>(o);
  const float scale_log2 = p.scale * 1.4426950408889634f;

  for (int it = 0; it < n_tiles; ++it) {
    cp_async_wait<0>();
    __syncthreads();  // tile `it` (and Q) landed; every warp is done with tile it - 1; tile it + 1's slots are listed
    const int count = counts[it % K::kRing];
    const T* kv;
    if constexpr (K::kDsMla) {
      if (count > 0) convert_ds_mla_tile<K>(staging, k_smem);
      __syncthreads();  // the K tile is ready and the staging tile free
      kv = k_smem;
    } else {
      kv = k_smem + (it % 2) * kTileElems;
    }
    // Warp 0 reads tile it + 2's indices before issuing its share of the
    // gather and compacts them after, so the read's latency hides behind the
    // issue (and the registers are free again during the math).
    const bool list_next = warp == 0 && it + 2 < n_tiles;
    if (list_next) fetch_indices<K>(p, idx, it + 2, raw);
    if (it + 1 < n_tiles) {
      const int r = (it + 1) % K::kRing;
      load_rows<K>(p, slots + r * K::kBlockN, counts[r],
                   K::kDsMla ? static_cast<void*>(staging) : static_cast<void*>(k_smem + ((it + 1) % 2) * kTileElems));
    }
    cp_async_commit();
    if (list_next) {
      const int r = (it + 2) % K::kRing;  // last used by tile it - 1, which every warp is done with
      compact_slots<K>(p, raw, slots + r * K::kBlockN, counts + r);
    }
    if (count == 0) continue;  // every thread reads the same count

    float s[K::kNTilesS][4];
    compute_qk<K>(q_smem, kv, rg, cg, s);
    const int key_limit[2] = {count, count};
    update_softmax<K>(s, st, 0, count < K::kBlockN, key_limit, scale_log2, rg, cg, reduce, row_vec, p_smem);
    compute_pv<K>(p_smem, kv, row_vec, warp, o);
  }
  cp_async_wait<0>();
  write_sparse_out<K>(p, t, h0, st, o, reduce, row_vec);
}

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1) sparse_mla_mma_kernel(const __grid_constant__ SparseParams p) {
  kernel_body_if_fits<K>([&](auto k) { sparse_mla_mma_body<decltype(k)>(p); });
}

// Launches one configuration (instantiated in sparse_mla_mma_{bf16,fp8}.cu).
template <class K>
void launch_sparse_mla_mma_config(const SparseParams& p, cudaStream_t stream);

}  // namespace lattn::cuda::sm80

// The configurations (block_m, block_n, warps), in the launcher's order of
// preference: 64 heads x 64 keys needs Hopper's 227 KB of shared memory (bf16
// cache); 64 x 32 fits an A100; 16-row tiles serve 16 heads or fewer and
// GPUs with 99 KB.
#define LATTN_SPARSE_MMA_CONFIGS(X) \
  X(64, 64, 8)                      \
  X(64, 32, 8)                      \
  X(16, 64, 8)                      \
  X(16, 32, 4)
