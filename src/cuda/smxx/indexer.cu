// The lightning indexer on CUDA (lattn/sparse.h; sm80+, portable): the key
// cache write, the logits and a deterministic top-k.
//
// Key write: one warp per token; amax a warp reduction, then fp8(k / s) with
// s = max(amax / 448, FLT_MIN), the host's rule and rounding (RNE,
// saturating), so device and host caches match bit for bit.
//
// Logits: a block per (token, 512 positions), 64 at a time: the token's
// queries [H, D] and the 64 keys (fp8 widened to f32) sit in shared memory;
// 4 threads per key each own H/4 heads, and
//   logit = s_key · Σ_h w_h · relu(q_h · k8)     (s_key > 0, so it factors out)
// is reduced over the 4 with shuffles. CUDA cores, f32 math.
//
// Top-k: a block of 1024 threads per token over its logits row. Logits map
// to order-preserving 32-bit keys (NaN lowest, -0 = +0); a 4-pass 8-bit radix
// select finds the k-th largest key τ; every key > τ and the first
// (lowest-position) keys == τ are gathered as 64-bit (key, ~position) words
// and bitonic-sorted in shared memory: logit descending, ties to the lower
// position, the order the host gives. O(positions) per token, k <= 4096.
// Rows longer than one 4096-position chunk split the passes across CTAs (one
// per chunk, so a few decode tokens fill the GPU): four histogram launches
// add each chunk's counts to the row's global histogram (every CTA replays
// the digit choices of the passes before it from those histograms), a
// gather launch sends the keys > τ to a global candidate list and counts
// each chunk's keys == τ, and the one-CTA kernel above takes the keys == τ
// from the first such chunks in position order, sorts and writes.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/device_ops.h"
#include "lattn/errors.h"
#include "lattn/sparse.h"

namespace lattn::cuda {
namespace {

constexpr int kKeysPerTile = 64;
constexpr int kTilesPerBlock = 8;
constexpr int kLogitThreads = 256;  // 4 per key
constexpr int kTopkThreads = 1024;
constexpr int kMaxTopk = 4096;  // candidates sorted in shared memory (32 KiB)
constexpr int kSplitChunk = 4096;  // positions per CTA of the split top-k
constexpr int kSplitThreads = 256;
constexpr int kSplitPer = kSplitChunk / kSplitThreads;  // positions per thread, loaded at once

// Which request a token belongs to: the last r with qsl[r] <= t (empty requests skipped).
__device__ __forceinline__ int token_request(const int32_t* qsl, int64_t qsl_stride, int B, int t) {
  int lo = 0, hi = B - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (qsl[mid * qsl_stride] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

struct Batch {
  const int32_t* block_table;
  int64_t bt_stride_r, bt_stride_b;
  const int32_t* qsl;
  int64_t qsl_stride;
  const int32_t* seq_lens;
  int64_t sl_stride;
  int B;
  int block_size, num_blocks;
};

// Request and visible length (position + 1) of token t.
__device__ __forceinline__ void token_span(const Batch& b, int t, int& r, int& visible) {
  r = token_request(b.qsl, b.qsl_stride, b.B, t);
  const int q0 = b.qsl[r * b.qsl_stride], q1 = b.qsl[(r + 1) * b.qsl_stride];
  visible = b.seq_lens[r * b.sl_stride] - (q1 - q0) + (t - q0) + 1;
}

// Block id of position p of request r, or -1 when the table holds an id outside the cache.
__device__ __forceinline__ int block_of(const Batch& b, int r, int p) {
  const int id = b.block_table[r * b.bt_stride_r + (p / b.block_size) * b.bt_stride_b];
  return id >= 0 && id < b.num_blocks ? id : -1;
}

// ---------------------------------------------------------------------------
// Key write.

__device__ __forceinline__ uint32_t sign_bit(float v) { return __float_as_uint(v) >> 31; }
__device__ __forceinline__ uint32_t sign_bit(bf16_t v) { return uint32_t(__bfloat16_as_ushort(v)) >> 15; }
__device__ __forceinline__ uint32_t sign_bit(f16_t v) { return uint32_t(__half_as_ushort(v)) >> 15; }

template <class T>
__global__ void k_cache_write_kernel(const T* k, int64_t k_stride, const int64_t* slots, int64_t slot_stride, int T_,
                                     int D, uint8_t* cache, int64_t block_stride, int64_t entry_stride, int block_size,
                                     int64_t capacity) {
  const int t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (t >= T_) return;
  const int64_t slot = slots[t * slot_stride];
  if (slot < 0 || slot >= capacity) return;
  float amax = 0.f;
  for (int d = lane; d < D; d += 32) {
    const float x = to_f32(k[t * k_stride + d]);
    if (isfinite(x)) amax = fmaxf(amax, fabsf(x));
  }
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float scale = fmaxf(amax / 448.f, FLT_MIN);
  uint8_t* e = cache + (slot / block_size) * block_stride + (slot % block_size) * entry_stride;
  for (int d = lane; d < D; d += 32) {
    const T v = k[t * k_stride + d];
    const float x = to_f32(v);
    // NaN keeps its sign, as on the host: read from the input's own bits, since
    // GPU conversions and arithmetic make a NaN the canonical (positive) one.
    e[d] = isnan(x) ? uint8_t(sign_bit(v) << 7 | 0x7fu)
                    : uint8_t(__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3));
  }
  if (lane == 0) memcpy(e + D, &scale, 4);
}

// ---------------------------------------------------------------------------
// Logits.

struct LogitParams {
  const void* q;
  int64_t q_stride_t, q_stride_h;
  const float* w;
  int64_t w_stride_t, w_stride_h;
  const uint8_t* cache;
  int64_t block_stride, entry_stride;
  float* logits;  // [T, S] row stride logits_stride
  int64_t logits_stride;
  int S, H, D, t0;  // t0: first token of this launch (logits row 0)
  Batch b;
};

template <class T>
__global__ void __launch_bounds__(kLogitThreads) logits_kernel(LogitParams p) {
  extern __shared__ float smem[];
  const int H = p.H, D = p.D;
  float* qs = smem;        // [H][D]
  float* ks = qs + H * D;  // [kKeysPerTile][D + 1]
  float* scales = ks + kKeysPerTile * (D + 1);
  float* ws = scales + kKeysPerTile;  // [H]
  const int t = p.t0 + blockIdx.y;
  int r, visible;
  token_span(p.b, t, r, visible);
  visible = min(visible, p.S);
  float* row = p.logits + int64_t(blockIdx.y) * p.logits_stride;
  const int first = blockIdx.x * kKeysPerTile * kTilesPerBlock;
  // Positions past the token's own: -inf (the whole row is written).
  for (int i = threadIdx.x; i < kKeysPerTile * kTilesPerBlock; i += blockDim.x) {
    const int pos = first + i;
    if (pos >= visible && pos < p.S) row[pos] = -INFINITY;
  }
  if (first >= visible) return;
  const T* q = static_cast<const T*>(p.q) + int64_t(t) * p.q_stride_t;
  for (int i = threadIdx.x; i < H * D; i += blockDim.x) qs[i] = to_f32(q[(i / D) * p.q_stride_h + i % D]);
  for (int h = threadIdx.x; h < H; h += blockDim.x) ws[h] = p.w[int64_t(t) * p.w_stride_t + h * p.w_stride_h];
  const int key = threadIdx.x / 4, part = threadIdx.x % 4;
  for (int tile = 0; tile < kTilesPerBlock; ++tile) {
    const int p0 = first + tile * kKeysPerTile;
    if (p0 >= visible) break;
    __syncthreads();  // previous tile consumed (and q loaded)
    for (int i = threadIdx.x; i < kKeysPerTile * D; i += blockDim.x) {
      const int j = i / D, d = i % D, pos = p0 + j;
      float v = 0.f;
      if (pos < visible) {
        const int blk = block_of(p.b, r, pos);
        if (blk >= 0) {
          const uint8_t* e = p.cache + blk * p.block_stride + (pos % p.b.block_size) * p.entry_stride;
          __nv_fp8_e4m3 f;
          f.__x = e[d];
          v = float(f);
          if (d == 0) memcpy(&scales[j], e + D, 4);  // entries are D + 4 bytes: maybe not 4-aligned
        } else if (d == 0) {
          scales[j] = NAN;  // a block id outside the cache: no key
        }
      }
      ks[j * (D + 1) + d] = v;
    }
    __syncthreads();
    float acc = 0.f;
    const float* kr = ks + key * (D + 1);
    for (int h = part; h < H; h += 4) {
      const float* qh = qs + h * D;
      float dot = 0.f;
      for (int d = 0; d < D; ++d) dot = fmaf(qh[d], kr[d], dot);
      acc = fmaf(ws[h], fmaxf(dot, 0.f), acc);
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    const int pos = p0 + key;
    if (part == 0 && pos < visible) row[pos] = acc * scales[key];
  }
}

// ---------------------------------------------------------------------------
// Top-k.

__device__ __forceinline__ uint32_t sort_key(float v) {
  if (isnan(v)) return 0u;
  if (v == 0.f) v = 0.f;
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct TopkParams {
  const float* logits;  // row i = token t0 + i
  int64_t logits_stride;
  const int32_t* lengths;  // per token (topk_positions), or nullptr: from the batch
  int64_t lengths_stride;
  int32_t* out;
  int64_t out_stride;
  int S, k, t0;
  bool slots;  // write cache slots (needs the batch) instead of positions
  Batch b;
};

// The split top-k's global state, zeroed before its first launch; per row
// (logits row i): hist [4][256] (each radix pass's counts over the row), gt
// (candidates above τ so far), eq [chunks] (keys == τ per chunk); cand [k]
// the candidates above τ. ints == nullptr: no split (one CTA per row).
struct SplitWork {
  int* ints;                 // [rows][row_ints]
  unsigned long long* cand;  // [rows][k]
  int chunks, row_ints;
  static constexpr int kGt = 4 * 256, kEq = kGt + 1;
  __device__ int* row(int i_row) const { return ints + int64_t(i_row) * row_ints; }
};

// The number of positions of row i_row (token t) and its request.
__device__ __forceinline__ int topk_row_length(const TopkParams& p, int t, int& r) {
  int n;
  r = 0;
  if (p.lengths) {
    n = p.lengths[int64_t(t) * p.lengths_stride];
  } else {
    token_span(p.b, t, r, n);
  }
  return max(0, min(n, p.S));
}

// One warp: the digit the one-CTA radix select picks from a 256-bin histogram
// (walking down from 255 while a bin holds fewer than `need`): the largest d
// whose bins >= d hold at least `need` keys (0 if none), and what is still
// needed from it. Lane l owns bins [8 l, 8 l + 8).
__device__ __forceinline__ void select_digit_warp(const int* hist, int need, int& digit, int& need_out) {
  const int lane = threadIdx.x % 32;
  int b[8], sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum += (b[i] = hist[8 * lane + i]);
  int incl = sum;  // this lane's bins and every higher lane's
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const int v = __shfl_down_sync(0xffffffffu, incl, off);
    if (lane + off < 32) incl += v;
  }
  int found = -1, above_found = 0, above = incl - sum;
#pragma unroll
  for (int i = 7; i >= 0; --i) {
    if (found < 0 && above + b[i] >= need) found = 8 * lane + i, above_found = above;
    above += b[i];
  }
  const unsigned has = __ballot_sync(0xffffffffu, found >= 0);
  if (has == 0) {  // the walk stops at digit 0 with everything above it taken
    digit = 0;
    need_out = need - (__shfl_sync(0xffffffffu, incl, 0) - hist[0]);
  } else {
    const int src = 31 - __clz(int(has));
    digit = __shfl_sync(0xffffffffu, found, src);
    need_out = need - __shfl_sync(0xffffffffu, above_found, src);
  }
}

// Every thread: the prefix, mask and need after the first `passes` radix
// passes of a split row, replayed from its global histograms (the same on
// every CTA).
__device__ __forceinline__ void replay_passes(const int* hist, int passes, int k, uint32_t& prefix, uint32_t& mask,
                                              int& need) {
  __shared__ int h[4 * 256];
  __shared__ uint32_t s_prefix, s_mask;
  __shared__ int s_need;
  for (int i = threadIdx.x; i < passes * 256; i += blockDim.x) h[i] = hist[i];
  __syncthreads();
  if (threadIdx.x < 32) {
    uint32_t pf = 0, mk = 0;
    int nd = k;
    for (int j = 0; j < passes; ++j) {
      int d, left;
      select_digit_warp(h + 256 * j, nd, d, left);
      pf |= uint32_t(d) << (24 - 8 * j);
      mk |= 255u << (24 - 8 * j);
      nd = left;
    }
    if (threadIdx.x == 0) s_prefix = pf, s_mask = mk, s_need = nd;
  }
  __syncthreads();
  prefix = s_prefix, mask = s_mask, need = s_need;
}

// Split pass `pass` (digit bits [24 - 8 pass, 32 - 8 pass)): CTA (c, i_row)
// counts the digits of its chunk's keys that match the earlier passes'
// prefix and adds them to the row's histogram. Grid (chunks, rows).
__global__ void __launch_bounds__(kSplitThreads) topk_split_hist_kernel(TopkParams p, SplitWork w, int pass) {
  __shared__ int local[256];
  const int i_row = blockIdx.y, t = p.t0 + i_row, lane = threadIdx.x % 32;
  int r;
  const int n = topk_row_length(p, t, r), c0 = blockIdx.x * kSplitChunk;
  if (n <= p.k || c0 >= n) return;  // the whole CTA: the one-CTA kernel takes short rows
  int* hist = w.row(i_row);
  uint32_t prefix, mask;
  int need;
  const float* row = p.logits + int64_t(i_row) * p.logits_stride;
  float v[kSplitPer];
#pragma unroll
  for (int j = 0; j < kSplitPer; ++j) {  // all loads in flight before the replay
    const int i = c0 + j * kSplitThreads + threadIdx.x;
    v[j] = i < n ? row[i] : 0.f;
  }
  for (int i = threadIdx.x; i < 256; i += blockDim.x) local[i] = 0;
  replay_passes(hist, pass, p.k, prefix, mask, need);  // (its barriers also cover `local`)
  const int shift = 24 - 8 * pass;
#pragma unroll
  for (int j = 0; j < kSplitPer; ++j) {
    const int i = c0 + j * kSplitThreads + threadIdx.x;
    const uint32_t key = sort_key(v[j]);
    const bool take = i < n && (key & mask) == prefix;
    const int digit = take ? int((key >> shift) & 255u) : 256;
    // Lanes with the same digit add once (most keys of a row share the top digits).
    const unsigned peers = __match_any_sync(0xffffffffu, digit);
    if (take && lane == __ffs(int(peers)) - 1) atomicAdd(&local[digit], __popc(peers));
  }
  __syncthreads();
  for (int d = threadIdx.x; d < 256; d += blockDim.x) {
    if (local[d]) atomicAdd(&hist[256 * pass + d], local[d]);
  }
}

// After the four passes: CTA (c, i_row) appends its chunk's keys above τ to
// the row's candidates (any order: the final kernel sorts them) and stores
// how many of its keys equal τ. Grid (chunks, rows).
__global__ void __launch_bounds__(kSplitThreads) topk_split_gather_kernel(TopkParams p, SplitWork w) {
  __shared__ int s_eq;
  const int i_row = blockIdx.y, t = p.t0 + i_row, lane = threadIdx.x % 32;
  int r;
  const int n = topk_row_length(p, t, r), c0 = blockIdx.x * kSplitChunk;
  if (n <= p.k) return;
  int* ws = w.row(i_row);
  if (c0 >= n) {
    if (threadIdx.x == 0) ws[SplitWork::kEq + blockIdx.x] = 0;
    return;
  }
  const float* row = p.logits + int64_t(i_row) * p.logits_stride;
  float v[kSplitPer];
#pragma unroll
  for (int j = 0; j < kSplitPer; ++j) {
    const int i = c0 + j * kSplitThreads + threadIdx.x;
    v[j] = i < n ? row[i] : 0.f;
  }
  if (threadIdx.x == 0) s_eq = 0;
  uint32_t tau, mask;
  int need;
  replay_passes(ws, 4, p.k, tau, mask, need);
  unsigned long long* cand = w.cand + int64_t(i_row) * p.k;
  int eq = 0;
#pragma unroll
  for (int j = 0; j < kSplitPer; ++j) {
    const int i = c0 + j * kSplitThreads + threadIdx.x;
    const uint32_t key = sort_key(v[j]);
    const bool above = i < n && key > tau;
    eq += i < n && key == tau;
    const unsigned ballot = __ballot_sync(0xffffffffu, above);
    if (ballot == 0) continue;  // (the whole warp)
    int base = 0;
    if (lane == __ffs(int(ballot)) - 1) base = atomicAdd(&ws[SplitWork::kGt], __popc(ballot));
    base = __shfl_sync(0xffffffffu, base, __ffs(int(ballot)) - 1) + __popc(ballot & ((1u << lane) - 1u));
    if (above && base < p.k) cand[base] = (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - uint32_t(i));
  }
  for (int o = 16; o > 0; o /= 2) eq += __shfl_xor_sync(0xffffffffu, eq, o);
  if (lane == 0 && eq) atomicAdd(&s_eq, eq);
  __syncthreads();
  if (threadIdx.x == 0) ws[SplitWork::kEq + blockIdx.x] = s_eq;
}

// Every thread of the one-CTA kernel: the first `need` keys == tau of
// positions [lo, hi), in position order, into cand[base...] (a block scan per
// 1024 positions); base and need move on by what was taken.
__device__ __forceinline__ void take_equal(const float* row, int lo, int hi, uint32_t tau, unsigned long long* cand,
                                           int* warp_eq, int& base, int& need) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  for (int c0 = lo; c0 < hi && need > 0; c0 += blockDim.x) {
    const int i = c0 + tid;
    const bool eq = i < hi && sort_key(row[i]) == tau;
    const unsigned ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) warp_eq[warp] = __popc(ballot);
    __syncthreads();
    int before = __popc(ballot & ((1u << lane) - 1u)), total = 0;
    for (int w = 0; w < kTopkThreads / 32; ++w) {
      if (w < warp) before += warp_eq[w];
      total += warp_eq[w];
    }
    if (eq && before < need) {
      cand[base + before] = (static_cast<unsigned long long>(tau) << 32) | (0xffffffffu - uint32_t(i));
    }
    const int took = min(total, need);
    base += took;
    need -= took;
    __syncthreads();  // warp_eq reused by the next chunk
  }
}

__global__ void __launch_bounds__(kTopkThreads) topk_kernel(TopkParams p, SplitWork w) {
  __shared__ unsigned long long cand[kMaxTopk];
  __shared__ int hist[256];
  __shared__ int warp_eq[kTopkThreads / 32];
  __shared__ int s_digit, s_need, s_count;
  const int i_row = blockIdx.x, t = p.t0 + i_row, tid = threadIdx.x;
  int r;
  const int n = topk_row_length(p, t, r);
  const float* row = p.logits + int64_t(i_row) * p.logits_stride;
  const int k = p.k;
  int m;  // candidates
  if (n > k && w.ints) {
    // Split: τ and the keys above it come from the split launches; the keys
    // == τ from the first chunks holding any, in position order.
    const int* ws = w.row(i_row);
    uint32_t tau, mask;
    int need;
    replay_passes(ws, 4, k, tau, mask, need);
    int base = k - need;
    const unsigned long long* above = w.cand + int64_t(i_row) * k;
    for (int i = tid; i < base; i += blockDim.x) cand[i] = above[i];
    for (int c = 0; c < w.chunks && need > 0; ++c) {
      if (ws[SplitWork::kEq + c] == 0) continue;  // (every thread reads the same count)
      take_equal(row, c * kSplitChunk, min(n, (c + 1) * kSplitChunk), tau, cand, warp_eq, base, need);
    }
    m = k;
  } else if (n <= k) {
    for (int i = tid; i < n; i += blockDim.x) {
      cand[i] = (static_cast<unsigned long long>(sort_key(row[i])) << 32) | (0xffffffffu - uint32_t(i));
    }
    m = n;
  } else {
    // Radix select of the k-th largest key tau, 8 bits at a time.
    uint32_t prefix = 0, mask = 0;
    int need = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
      __syncthreads();
      for (int i = tid; i < n; i += blockDim.x) {
        const uint32_t key = sort_key(row[i]);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
      }
      __syncthreads();
      if (tid == 0) {
        int d = 255;
        for (; d > 0 && hist[d] < need; --d) need -= hist[d];
        s_digit = d;
        s_need = need;
      }
      __syncthreads();
      need = s_need;
      prefix |= uint32_t(s_digit) << shift;
      mask |= 255u << shift;
      __syncthreads();  // s_digit / s_need read by every thread before the next pass writes them
    }
    const uint32_t tau = prefix;
    // Keys above tau (k - need of them): any order, they are sorted next.
    if (tid == 0) s_count = 0;
    __syncthreads();
    for (int i = tid; i < n; i += blockDim.x) {
      const uint32_t key = sort_key(row[i]);
      if (key > tau)
        cand[atomicAdd(&s_count, 1)] = (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - uint32_t(i));
    }
    __syncthreads();
    int base = s_count;  // == k - need
    // Then the first `need` keys equal to tau, in position order.
    take_equal(row, 0, n, tau, cand, warp_eq, base, need);
    m = k;
  }
  // Bitonic sort (descending) of the m candidates, padded with 0 (below every real word).
  int P = 1;
  while (P < m) P *= 2;
  for (int i = m + tid; i < P; i += blockDim.x) cand[i] = 0ull;
  __syncthreads();
  for (int size = 2; size <= P; size *= 2) {
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int i = tid; i < P / 2; i += blockDim.x) {
        const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
        const bool descending = (lo & size) == 0;
        const unsigned long long a = cand[lo], c = cand[hi];
        if ((a < c) == descending) {
          cand[lo] = c;
          cand[hi] = a;
        }
      }
      __syncthreads();
    }
  }
  int32_t* out = p.out + int64_t(t) * p.out_stride;
  for (int i = tid; i < k; i += blockDim.x) {
    int32_t v = -1;
    if (i < m) {
      const int pos = int(0xffffffffu - uint32_t(cand[i] & 0xffffffffull));
      v = pos;
      if (p.slots) {
        const int blk = block_of(p.b, r, pos);
        v = blk >= 0 ? blk * p.b.block_size + pos % p.b.block_size : -1;
      }
    }
    out[i] = v;
  }
}

// ---------------------------------------------------------------------------
// Host side.

// Device copies of host index arrays for one call (freed in stream order).
class StreamScratch {
 public:
  explicit StreamScratch(cudaStream_t s) : s_(s) {}
  ~StreamScratch() {
    for (void* p : ptrs_) cudaFreeAsync(p, s_);
  }
  void* alloc(size_t bytes) {
    void* p = nullptr;
    LATTN_CUDA_CHECK(cudaMallocAsync(&p, std::max<size_t>(bytes, 16), s_));
    ptrs_.push_back(p);
    return p;
  }
  // A row-major device copy of a 1- or 2-dim host int32 tensor.
  const int32_t* upload(const Tensor& t) {
    const int64_t rows = t.size(0), cols = t.dim() == 2 ? t.size(1) : 1;
    const int64_t col_stride = t.dim() == 2 ? t.stride(1) : 0;
    std::vector<int32_t> host(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j)
        host[size_t(i * cols + j)] = t.data_as<const int32_t>()[i * t.stride(0) + j * col_stride];
    }
    auto* d = static_cast<int32_t*>(alloc(host.size() * 4));
    LATTN_CUDA_CHECK(cudaMemcpyAsync(d, host.data(), host.size() * 4, cudaMemcpyHostToDevice, s_));
    LATTN_CUDA_CHECK(cudaStreamSynchronize(s_));  // `host` is freed when this returns
    return d;
  }

 private:
  cudaStream_t s_;
  std::vector<void*> ptrs_;
};

// The batch arrays on the device (uploaded when they are on the host).
Batch device_batch(const IndexerArgs& a, const IndexerKeyCache& cache, StreamScratch& scratch) {
  Batch b{};
  b.B = int(a.seq_lens.size(0));
  b.block_size = int(cache.block_size());
  b.num_blocks = int(cache.num_blocks());
  if (a.block_table.device().is_cpu()) {
    b.block_table = scratch.upload(a.block_table);
    b.bt_stride_r = a.block_table.size(1), b.bt_stride_b = 1;
  } else {
    b.block_table = a.block_table.data_as<const int32_t>();
    b.bt_stride_r = a.block_table.stride(0), b.bt_stride_b = a.block_table.stride(1);
  }
  if (a.query_start_loc.device().is_cpu()) {
    b.qsl = scratch.upload(a.query_start_loc), b.qsl_stride = 1;
  } else {
    b.qsl = a.query_start_loc.data_as<const int32_t>(), b.qsl_stride = a.query_start_loc.stride(0);
  }
  if (a.seq_lens.device().is_cpu()) {
    b.seq_lens = scratch.upload(a.seq_lens), b.sl_stride = 1;
  } else {
    b.seq_lens = a.seq_lens.data_as<const int32_t>(), b.sl_stride = a.seq_lens.stride(0);
  }
  return b;
}

// The split top-k's workspace for up to `rows` rows of width S, or none
// (ints == nullptr: one CTA per row) when the rows fit one chunk.
// LATTN_TOPK_SPLIT=0 keeps one CTA per row (the benchmark's comparison).
SplitWork split_work(int S, int k, int rows, StreamScratch& scratch) {
  SplitWork w{};
  const char* env = std::getenv("LATTN_TOPK_SPLIT");
  if (S <= kSplitChunk || S <= k || rows > 65535 || (env && std::string(env) == "0")) return w;
  w.chunks = (S + kSplitChunk - 1) / kSplitChunk;
  w.row_ints = SplitWork::kEq + w.chunks;
  w.ints = static_cast<int*>(scratch.alloc(size_t(rows) * size_t(w.row_ints) * 4));
  w.cand = static_cast<unsigned long long*>(scratch.alloc(size_t(rows) * size_t(k) * 8));
  return w;
}

// Top-k of `rows` logits rows: the split launches first (when w has a
// workspace), then the one-CTA kernel.
void launch_topk(const TopkParams& p, int rows, const SplitWork& w, cudaStream_t s) {
  if (w.ints) {
    LATTN_CUDA_CHECK(cudaMemsetAsync(w.ints, 0, size_t(rows) * size_t(w.row_ints) * 4, s));
    const dim3 grid(unsigned(w.chunks), unsigned(rows));
    for (int pass = 0; pass < 4; ++pass) {
      topk_split_hist_kernel<<<grid, kSplitThreads, 0, s>>>(p, w, pass);
      LATTN_CUDA_CHECK_LAUNCH("topk_split_hist_kernel");
    }
    topk_split_gather_kernel<<<grid, kSplitThreads, 0, s>>>(p, w);
    LATTN_CUDA_CHECK_LAUNCH("topk_split_gather_kernel");
  }
  topk_kernel<<<unsigned(rows), kTopkThreads, 0, s>>>(p, w);
  LATTN_CUDA_CHECK_LAUNCH("topk_kernel");
}

// The longest visible row: max_seq_len, or the host seq_lens' maximum.
int row_width(const IndexerArgs& a) {
  if (a.max_seq_len > 0) return a.max_seq_len;
  int longest = 1;
  for (int64_t r = 0; r < a.seq_lens.size(0); ++r) {
    longest = std::max(longest, a.seq_lens.data_as<const int32_t>()[r * a.seq_lens.stride(0)]);
  }
  return longest;
}

void check_shape_limits(const char* op, int H, int D) {
  const size_t smem = (size_t(H) * D + size_t(kKeysPerTile) * (D + 1) + kKeysPerTile + H) * 4;
  if (smem > 160 * 1024) {
    throw ValueError(std::string(op) + ": the cuda indexer keeps one token's queries in shared memory: H * D = " +
                     std::to_string(H * D) + " is too large (at most about 36000 with D = 128)");
  }
}

// Logits rows [t0, t0 + rows) into `logits` (row stride ld).
void launch_logits(const IndexerArgs& a, const IndexerKeyCache& cache, const Batch& b, float* logits, int64_t ld, int S,
                   int t0, int rows, cudaStream_t s) {
  LogitParams p{};
  p.q = a.q.data();
  p.q_stride_t = a.q.stride(0), p.q_stride_h = a.q.stride(1);
  p.w = a.weights.data_as<const float>();
  p.w_stride_t = a.weights.stride(0), p.w_stride_h = a.weights.stride(1);
  p.cache = static_cast<const uint8_t*>(cache.data.data());
  p.block_stride = cache.data.stride(0), p.entry_stride = cache.data.stride(1);
  p.logits = logits, p.logits_stride = ld;
  p.S = S, p.H = int(a.q.size(1)), p.D = cache.head_dim, p.t0 = t0;
  p.b = b;
  const size_t smem = (size_t(p.H) * p.D + size_t(kKeysPerTile) * (p.D + 1) + kKeysPerTile + p.H) * 4;
  const int per_block = kKeysPerTile * kTilesPerBlock;
  const dim3 grid(unsigned((S + per_block - 1) / per_block), unsigned(rows));
  auto launch = [&](auto kernel) {
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    kernel<<<grid, kLogitThreads, smem, s>>>(p);
  };
  switch (a.q.dtype()) {
    case DType::bf16:
      launch(logits_kernel<bf16_t>);
      break;
    case DType::f16:
      launch(logits_kernel<f16_t>);
      break;
    default:
      launch(logits_kernel<float>);
      break;
  }
  LATTN_CUDA_CHECK_LAUNCH("indexer logits_kernel");
}

}  // namespace

void indexer_k_cache_write(const Tensor& k, const IndexerKeyCache& cache, const Tensor& slot_mapping, Stream stream) {
  DeviceGuard guard(cache.device().index);
  const int T = int(slot_mapping.size(0));
  if (T == 0) return;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  constexpr int kWarps = 8;
  const dim3 grid(unsigned((T + kWarps - 1) / kWarps));
  auto* dst = static_cast<uint8_t*>(cache.data.data());
  const int64_t capacity = cache.num_blocks() * cache.block_size();
  auto launch = [&](auto* kp) {
    using E = std::remove_const_t<std::remove_pointer_t<decltype(kp)>>;
    k_cache_write_kernel<E><<<grid, kWarps * 32, 0, s>>>(
        kp, k.stride(0), slot_mapping.data_as<const int64_t>(), slot_mapping.stride(0), T, cache.head_dim, dst,
        cache.data.stride(0), cache.data.stride(1), int(cache.block_size()), capacity);
  };
  switch (k.dtype()) {
    case DType::bf16:
      launch(k.data_as<const bf16_t>());
      break;
    case DType::f16:
      launch(k.data_as<const f16_t>());
      break;
    default:
      launch(k.data_as<const float>());
      break;
  }
  LATTN_CUDA_CHECK_LAUNCH("indexer k_cache_write_kernel");
}

void indexer_logits(const IndexerArgs& a, const IndexerKeyCache& cache, const Tensor& logits) {
  check_shape_limits("indexer_logits", int(a.q.size(1)), cache.head_dim);
  DeviceGuard guard(cache.device().index);
  auto s = reinterpret_cast<cudaStream_t>(a.stream);
  StreamScratch scratch(s);
  const Batch b = device_batch(a, cache, scratch);
  launch_logits(a, cache, b, logits.data_as<float>(), logits.stride(0), int(logits.size(1)), 0, int(a.q.size(0)), s);
}

void indexer_topk(const IndexerArgs& a, const IndexerKeyCache& cache, const Tensor& topk_indices) {
  const int k = int(topk_indices.size(1));
  if (k > kMaxTopk) {
    throw ValueError("indexer_topk: the cuda indexer sorts up to " + std::to_string(kMaxTopk) +
                     " winners per token in shared memory; topk_indices has " + std::to_string(k) + " columns");
  }
  check_shape_limits("indexer_topk", int(a.q.size(1)), cache.head_dim);
  DeviceGuard guard(cache.device().index);
  auto s = reinterpret_cast<cudaStream_t>(a.stream);
  StreamScratch scratch(s);
  const Batch b = device_batch(a, cache, scratch);
  const int S = row_width(a), T = int(a.q.size(0));
  // Logits scratch: at most ~256 MiB at a time (chunks of tokens).
  const int rows = int(std::max<int64_t>(1, std::min<int64_t>(T, (int64_t(64) << 20) / S)));
  auto* logits = static_cast<float*>(scratch.alloc(size_t(rows) * S * 4));
  const SplitWork w = split_work(S, k, rows, scratch);
  for (int t0 = 0; t0 < T; t0 += rows) {
    const int n = std::min(rows, T - t0);
    launch_logits(a, cache, b, logits, S, S, t0, n, s);
    TopkParams p{};
    p.logits = logits, p.logits_stride = S;
    p.out = topk_indices.data_as<int32_t>(), p.out_stride = topk_indices.stride(0);
    p.S = S, p.k = k, p.t0 = t0, p.slots = true, p.b = b;
    launch_topk(p, n, w, s);
  }
}

void topk_positions(const Tensor& logits, const Tensor& lengths, const Tensor& out, Stream stream) {
  const int k = int(out.size(1));
  if (k > kMaxTopk) {
    throw ValueError("topk_positions: the cuda top-k sorts up to " + std::to_string(kMaxTopk) +
                     " winners per row in shared memory; out has " + std::to_string(k) + " columns");
  }
  DeviceGuard guard(logits.device().index);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  TopkParams p{};
  p.logits = logits.data_as<const float>(), p.logits_stride = logits.stride(0);
  p.lengths = lengths.data_as<const int32_t>(), p.lengths_stride = lengths.stride(0);
  p.out = out.data_as<int32_t>(), p.out_stride = out.stride(0);
  p.S = int(logits.size(1)), p.k = k, p.t0 = 0, p.slots = false;
  if (logits.size(0) == 0) return;
  StreamScratch scratch(s);
  const int rows = int(logits.size(0));
  launch_topk(p, rows, split_work(p.S, k, rows, scratch), s);
}

}  // namespace lattn::cuda
