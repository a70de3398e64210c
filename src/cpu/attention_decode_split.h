// src/cpu/attention_decode_split.h — one decode split of the `cpu` backend's
// f32 FMA path (internal): every head and query token of one request against
// one range of its cached context, partial output and LSE written for the
// split-KV combine. Include only from kernels_<isa>.cpp files, through
// attention_kernels_impl.h (internal linkage: see attention_tile_primitives.h).
#pragma once

#include "cpu/attention_tile_primitives.h"

namespace lattn::cpu {
namespace {

// Decode, f32 FMA path: each tile's cache rows are converted to f32 once and
// then serve every lane (all heads and query tokens of the request).

struct DecodeScratchF32 {
  float* qt;  // [G][L+R][W]
  float* s;   // [G][kKeyTile][W]
  float* ot;  // [G][L][W]
  LaneStates softmax;      // m, l, alpha, lane_end, group_min_end
  float* row;              // [W][L+R]: a query row, or a group's output rows
  float* lse;              // [W]
  float* keys;             // [kKeyTile][L+R] the tile's cache rows in f32
  const float** krow;      // [kKeyTile]
  const char** rows;       // [kKeyTile] this tile's cache rows
  const char** next_rows;  // [kKeyTile] the next tile's, being prefetched

  DecodeScratchF32(Arena& a, int groups, int w, int latent, int rope) {
    const int dim = latent + rope;
    qt = a.take<float>(size_t(groups) * dim * w);
    s = a.take<float>(size_t(groups) * kKeyTile * w);
    ot = a.take<float>(size_t(groups) * latent * w);
    softmax = LaneStates(a, groups, w);
    row = a.take<float>(size_t(w) * dim);
    lse = a.take<float>(size_t(w));
    keys = a.take<float>(size_t(kKeyTile) * dim);
    krow = a.take<const float*>(kKeyTile);
    rows = a.take<const char*>(kKeyTile);
    next_rows = a.take<const char*>(kKeyTile);
  }
};

// Pointer to the cache row of logical key `pos` of the job's request.
inline const char* cache_row(const DecodeSplitJob& job, int pos) {
  const int64_t block = job.block_table[pos / job.block_size];
  const int64_t offset = block * job.block_stride + int64_t(pos % job.block_size) * (job.kv_lora_rank + job.rope_dim);
  return static_cast<const char*>(job.cache) + offset * int64_t(dtype_bytes(job.cache_dtype));
}

// Cache rows of keys [k0, k0 + n) (n may be <= 0: none).
inline void tile_rows(const DecodeSplitJob& job, int k0, int n, const char** rows) {
  for (int kk = 0; kk < n; ++kk) rows[kk] = cache_row(job, k0 + kk);
}

// The prefetcher of the tile after the one at k0 (its rows go to next_rows),
// spread over `score_steps` calls of step().
inline RowPrefetcher next_tile_prefetcher(const DecodeSplitJob& job, int k0, int kmax, int64_t score_steps,
                                          const char** next_rows) {
  const int next = k0 + kKeyTile, n = imax(0, imin(kKeyTile, kmax - next));
  tile_rows(job, next, n, next_rows);
  const int row_bytes = (job.kv_lora_rank + job.rope_dim) * int(dtype_bytes(job.cache_dtype));
  const int lines = div_up(row_bytes, 64);
  const int64_t total = int64_t(n) * lines;
  const int interval = total > 0 ? int(imax(1, int(score_steps / total))) : 1;
  return RowPrefetcher{next_rows, n, lines, interval};
}

// step() calls one score tile makes (qk_tile_*: per register block of keys,
// one per dimension step): blocks of kb keys over one or two groups.
inline int64_t score_steps(int n, int groups, int dim_steps, int kb2, int kb1) {
  const int64_t pair_blocks = groups / 2, single = groups % 2;
  const auto blocks = [n](int kb) { return int64_t(n / kb + n % kb); };
  return (pair_blocks * blocks(kb2) + single * blocks(kb1)) * dim_steps;
}

inline int decode_lane_ends(const DecodeSplitJob& job, int groups, int w, int32_t* lane_end, int32_t* group_min_end) {
  const int lanes = job.s_q * job.num_heads;
  for (int lane = 0; lane < groups * w; ++lane) {
    int end = job.key_begin;  // padding lanes see nothing
    if (lane < lanes) {
      const int j = lane / job.num_heads;
      end = imax(job.key_begin, imin(job.key_end, job.seq_len - job.s_q + j + 1));
    }
    lane_end[lane] = end;
  }
  return finish_lane_ends(lane_end, groups, w, group_min_end);
}

// Query row of lane (j, h): [ql_nope | q_pe] converted to f32 in row[L+R].
template <class I>
void decode_query_row_f32(const DecodeSplitJob& job, int lane, float* row) {
  const size_t esize = dtype_bytes(job.q_dtype);
  const int j = lane / job.num_heads, h = lane % job.num_heads;
  const char* qn = static_cast<const char*>(job.ql_nope) + size_t(j * job.ql_stride_t + h * job.ql_stride_h) * esize;
  const char* qp = static_cast<const char*>(job.q_pe) + size_t(j * job.qpe_stride_t + h * job.qpe_stride_h) * esize;
  I::to_f32(qn, job.q_dtype, job.kv_lora_rank, row);
  I::to_f32(qp, job.q_dtype, job.rope_dim, row + job.kv_lora_rank);
}

// The split's partial results (rows [W][L] and lse [W] are scratch). A full
// group's rows are transposed straight into job.o: staging them in `rows`
// and copying them was ~2 us per 32 KiB split on one thread, and on two
// threads the copy alone showed as ~10 % of a B1 S1024 step's CPU samples
// (docs/perf.md, "CPU decode at batch 1: fewer splits and a vectorized combine").
template <class I>
void decode_write_partials(const DecodeSplitJob& job, float* ot, const float* m, const float* l, float* rows,
                           float* lse) {
  constexpr int W = I::W;
  const int lanes = job.s_q * job.num_heads, latent = job.kv_lora_rank;
  for (int g = 0; g * W < lanes; ++g) {
    float* o = job.o + size_t(g * W) * latent;
    const bool full = (g + 1) * W <= lanes;
    finalize_group<I>(ot, m, l, g, latent, job.cache_scale, full ? o : rows, lse);
    for (int i = 0; i < W && g * W + i < lanes; ++i) {
      if (!full) {
        for (int d = 0; d < latent; ++d) o[size_t(i) * latent + d] = rows[size_t(i) * latent + d];
      }
      job.lse[g * W + i] = lse[i];
    }
  }
}

// One output row of the split-KV combine (docs/cpu.md, "Split-KV"):
//   dst[d] = (sum_s weights[s] * parts[s][d]) * scale, d < n, rounded to dst_dtype,
// the parts summed in the order given (the combine's fixed order). No parts:
// 0 * scale (0, or NaN for a NaN scale). Vectorized and fused (one pass,
// no [L] f32 row to fill, add into, scale and convert): at B1 S1024 on two
// threads the combine of two splits took 2.0-3.3 us this way, 4.3 us before.
template <class I>
void combine_row(const float* const* parts, const float* weights, int num_parts, int64_t n, float scale,
                 DType dst_dtype, void* dst) {
  constexpr int W = I::W;
  constexpr int kChunk = 8 * W;  // floats converted per from_f32 call
  alignas(64) float buf[kChunk];
  const typename I::F sv = I::set1(scale);
  char* out = static_cast<char*>(dst);
  const size_t esize = dtype_bytes(dst_dtype);
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int len = int(n - c0 < kChunk ? n - c0 : kChunk);
    int d = 0;
    for (; d + W <= len; d += W) {
      typename I::F acc = I::zero();
      for (int s = 0; s < num_parts; ++s) acc = I::fma(I::set1(weights[s]), I::load(parts[s] + c0 + d), acc);
      I::store(buf + d, I::mul(acc, sv));
    }
    for (; d < len; ++d) {  // a ragged end (n not a multiple of W): the same sums one lane at a time
      float acc = 0.f;
      for (int s = 0; s < num_parts; ++s) acc = __builtin_fmaf(weights[s], parts[s][c0 + d], acc);
      buf[d] = acc * scale;
    }
    I::from_f32(buf, len, dst_dtype, out + size_t(c0) * esize);
  }
}

template <class I>
size_t decode_scratch_bytes_f32(int lanes, int latent, int rope) {
  return layout_bytes<DecodeScratchF32>(div_up(lanes, I::W), I::W, latent, rope);
}

template <class I>
void decode_split_f32(const DecodeSplitJob& job) {
  constexpr int W = I::W;
  const int lanes = job.s_q * job.num_heads;
  const int groups = div_up(lanes, W);
  const int dim = job.kv_lora_rank + job.rope_dim;
  Arena arena(job.scratch);
  DecodeScratchF32 sc(arena, groups, W, job.kv_lora_rank, job.rope_dim);
  for (int lane = 0; lane < groups * W; ++lane) {
    if (lane < lanes) {
      decode_query_row_f32<I>(job, lane, sc.row);
    } else {
      for (int d = 0; d < dim; ++d) sc.row[d] = 0.f;
    }
    float* dst = sc.qt + size_t(lane / W) * dim * W + lane % W;
    for (int d = 0; d < dim; ++d) dst[size_t(d) * W] = sc.row[d];
  }
  const int kmax = decode_lane_ends(job, groups, W, sc.softmax.lane_end, sc.softmax.group_min_end);
  const int min_end = visible_min_end(sc.softmax.lane_end, groups * W, job.key_begin);
  init_state<I>(groups, sc.softmax.m, sc.softmax.l, sc.ot, job.kv_lora_rank);
  const SoftmaxState st = sc.softmax.state();
  // fp8: S = q · (stored * scale) = scale * (q · stored); O likewise.
  const float c = job.scale * job.cache_scale * kLog2e;
  tile_rows(job, job.key_begin, imin(kKeyTile, kmax - job.key_begin), sc.rows);
  for (int k0 = job.key_begin; k0 < kmax; k0 += kKeyTile) {
    const int n = imin(kKeyTile, kmax - k0);
    RowPrefetcher pf =
        next_tile_prefetcher(job, k0, kmax, score_steps(n, groups, dim, I::kQkKeys2, I::kQkKeys1), sc.next_rows);
    for (int kk = 0; kk < n; ++kk) {
      float* dst = sc.keys + size_t(kk) * dim;
      I::to_f32(sc.rows[kk], job.cache_dtype, dim, dst);
      sc.krow[kk] = dst;
    }
    qk_tile_f32<I>(sc.qt, groups, dim, sc.krow, n, sc.s, &pf);
    softmax_tile<I>(sc.s, groups, n, k0, c, st);
    const int n_all = imax(0, imin(n, min_end - k0));  // keys every lane sees (s_q > 1: not the last s_q - 1)
    pv_tile_f32<I>(sc.s, groups, n_all, sc.krow, sc.ot, job.kv_lora_rank, sc.softmax.alpha);
    if (n_all < n) {
      pv_masked_tail<I>(sc.s, groups, n_all, n, k0, sc.softmax.lane_end, sc.ot, job.kv_lora_rank,
                        [&](int kk, int d) { return sc.krow[kk][d]; });
    }
    const char** done = sc.rows;
    sc.rows = sc.next_rows;
    sc.next_rows = done;
  }
  decode_write_partials<I>(job, sc.ot, sc.softmax.m, sc.softmax.l, sc.row, sc.lse);
}

}  // namespace
}  // namespace lattn::cpu
