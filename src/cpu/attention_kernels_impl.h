// src/cpu/attention_kernels_impl.h — the flash-attention kernels of the
// `cpu` backend (f32 FMA path), written once over an instruction-set policy
// `I` (internal). The bf16 dot-product path is attention_bf16_impl.h.
//
// Include only from kernels_<isa>.cpp files. Everything here has internal
// linkage (anonymous namespace): each of those files is compiled with its
// own ISA flags, and internal linkage keeps the linker from merging, say, an
// AVX-512 copy of a helper into baseline code (the usual ODR trap of
// per-file ISA flags; ctest cpu_isa_objects_have_no_weak_symbols guards it).
// For the same reason this file calls no inline function of other headers
// (dtype.h conversions, std::min): the policy brings its own.
//
// The policy I provides (F = one vector of W f32 lanes):
//   W, F; register-block sizes kQkKeys1/2 (keys per score block for one/two
//   groups) and kPvDims1/2 (output dims per block);
//   zero(), set1(x), load(p), store(p, v), bcast(p) (*p in every lane),
//   fma(a, b, c) = a*b + c, mul, add, sub, max (b when either is NaN),
//   exp2(x): 2^x, exactly 0 for x = -inf,
//   mask_keys(x, lane_end, key): x where key < lane_end[lane], else -inf,
//   neg_inf_to_zero(x), transpose(src, src_stride, dst, dst_stride) (W x W),
//   to_f32(src, dtype, n, dst), from_f32(src, n, dtype, dst),
//   pack_value_pairs(even, odd, n, dst).
//
// Algorithm (FlashAttention-2's online softmax, transposed for a CPU): a
// tile of query rows ("lanes") is packed so one vector holds one query
// dimension of W rows; each key's score for all W rows is then a sum of
// broadcast(key element) * vector, scores for a key are one vector, and the
// running max / sum of the softmax are per-lane vectors. Keys go by tiles of
// kKeyTile; for each tile: scores S, online-softmax update (new max m,
// rescale factor alpha = 2^(m_old - m_new), P = 2^(S*c - m)), then the
// output accumulators OT[d] (one vector per output dimension) are rescaled by
// alpha and accumulate P·V. Exponentials use base 2 with c = scale * log2(e).

#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/attention_kernels.h"

namespace lattn::cpu {
namespace {

// Keys per tile: the scores of a tile for 2 groups stay in L1 (2 x 64 x 64 B),
// and the per-tile rescale of the accumulators is amortized over 64 keys.
constexpr int kKeyTile = 64;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -__builtin_inff();

inline int imin(int a, int b) { return a < b ? a : b; }
inline int imax(int a, int b) { return a > b ? a : b; }
inline int div_up(int a, int b) { return (a + b - 1) / b; }
inline size_t round_up64(size_t n) { return (n + 63) & ~size_t(63); }

// Carves 64-byte aligned arrays out of a job's scratch. With a null base it
// only counts, so the *_scratch_bytes functions and the kernels share one
// layout description.
class Arena {
 public:
  explicit Arena(void* base) : base_(static_cast<char*>(base)) {}
  template <class T>
  T* take(size_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += round_up64(count * sizeof(T));
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

inline size_t dtype_bytes(DType t) {
  return t == DType::f32 ? 4 : (t == DType::fp8_e4m3 ? 1 : 2);
}

inline uint32_t load_u32(const uint16_t* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}

// Pulls the next key tile into L2 while the current one is computed: the
// score loops call step() once per dimension step, and every `interval`-th
// call fetches one more cache line, so the fetches spread over the whole
// score phase. Decode streams every cache row from memory exactly once;
// without this the first touch of a tile stalls the core instead of
// overlapping with the previous tile's math, and fetching a tile in one
// burst stalls it too (the miss queue fills). L2, not L1: the current
// tile's rows must stay in L1 meanwhile.
struct RowPrefetcher {
  const char* const* rows = nullptr;
  int count = 0;          // rows to fetch
  int lines_per_row = 0;  // 64-byte lines per row
  int interval = 1;       // step() calls per line
  int row = 0, line = 0, countdown = 1;

  void step() {
    if (--countdown > 0 || row >= count) return;
    countdown = interval;
    __builtin_prefetch(rows[row] + 64 * line, 0, 1);
    if (++line == lines_per_row) {
      line = 0;
      ++row;
    }
  }
};

// ---------------------------------------------------------------------------
// Scores S[g][kk] = Q_g · K[kk] (f32): qt [G][d][W], krow[kk] -> d floats,
// s [G][kKeyTile][W]. GB groups and KB keys per register block.

template <class I, int GB, int KB>
inline void qk_block_f32(const float* qt, int dim, const float* const* krow, float* s, RowPrefetcher* pf) {
  using F = typename I::F;
  constexpr int W = I::W;
  F acc[GB][KB];
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g) {
#pragma GCC unroll 32
    for (int kk = 0; kk < KB; ++kk) acc[g][kk] = I::zero();
  }
  const float* kr[KB];
#pragma GCC unroll 32
  for (int kk = 0; kk < KB; ++kk) kr[kk] = krow[kk];
  for (int d = 0; d < dim; ++d) {
    if (pf) pf->step();
    F q[GB];
#pragma GCC unroll 8
    for (int g = 0; g < GB; ++g) q[g] = I::load(qt + (size_t(g) * dim + d) * W);
#pragma GCC unroll 32
    for (int kk = 0; kk < KB; ++kk) {
      const F b = I::bcast(kr[kk] + d);
#pragma GCC unroll 8
      for (int g = 0; g < GB; ++g) acc[g][kk] = I::fma(b, q[g], acc[g][kk]);
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g) {
#pragma GCC unroll 32
    for (int kk = 0; kk < KB; ++kk) I::store(s + (size_t(g) * kKeyTile + kk) * W, acc[g][kk]);
  }
}

template <class I, int GB, int KB>
inline void qk_groups_f32(const float* qt, int dim, const float* const* krow, int n, float* s, RowPrefetcher* pf) {
  constexpr int W = I::W;
  int kk = 0;
  for (; kk + KB <= n; kk += KB) qk_block_f32<I, GB, KB>(qt, dim, krow + kk, s + size_t(kk) * W, pf);
  for (; kk < n; ++kk) qk_block_f32<I, GB, 1>(qt, dim, krow + kk, s + size_t(kk) * W, pf);
}

template <class I>
void qk_tile_f32(const float* qt, int groups, int dim, const float* const* krow, int n, float* s,
                 RowPrefetcher* pf = nullptr) {
  constexpr int W = I::W;
  int g = 0;
  for (; g + 2 <= groups; g += 2) {
    qk_groups_f32<I, 2, I::kQkKeys2>(qt + size_t(g) * dim * W, dim, krow, n, s + size_t(g) * kKeyTile * W, pf);
  }
  if (g < groups) {
    qk_groups_f32<I, 1, I::kQkKeys1>(qt + size_t(g) * dim * W, dim, krow, n, s + size_t(g) * kKeyTile * W, pf);
  }
}

// ---------------------------------------------------------------------------
// Output OT[g][d] = alpha_g * OT[g][d] + sum_kk P[g][kk] * V[kk][d] (f32):
// p [G][kKeyTile][W], vrow[kk] -> dv floats, ot [G][dv][W], alpha [G][W].

template <class I, int GB, int DT>
inline void pv_block_f32(const float* p, int n, const float* const* vrow, int d0, float* ot, int dv,
                         const float* alpha) {
  using F = typename I::F;
  constexpr int W = I::W;
  F acc[GB][DT];
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g) {
    const F a = I::load(alpha + size_t(g) * W);
#pragma GCC unroll 32
    for (int dt = 0; dt < DT; ++dt) acc[g][dt] = I::mul(I::load(ot + (size_t(g) * dv + d0 + dt) * W), a);
  }
  for (int kk = 0; kk < n; ++kk) {
    F pk[GB];
#pragma GCC unroll 8
    for (int g = 0; g < GB; ++g) pk[g] = I::load(p + (size_t(g) * kKeyTile + kk) * W);
    const float* v = vrow[kk] + d0;
#pragma GCC unroll 32
    for (int dt = 0; dt < DT; ++dt) {
      const F b = I::bcast(v + dt);
#pragma GCC unroll 8
      for (int g = 0; g < GB; ++g) acc[g][dt] = I::fma(b, pk[g], acc[g][dt]);
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g) {
#pragma GCC unroll 32
    for (int dt = 0; dt < DT; ++dt) I::store(ot + (size_t(g) * dv + d0 + dt) * W, acc[g][dt]);
  }
}

template <class I, int GB, int DT>
inline void pv_groups_f32(const float* p, int n, const float* const* vrow, float* ot, int dv, const float* alpha) {
  int d = 0;
  for (; d + DT <= dv; d += DT) pv_block_f32<I, GB, DT>(p, n, vrow, d, ot, dv, alpha);
  for (; d < dv; ++d) pv_block_f32<I, GB, 1>(p, n, vrow, d, ot, dv, alpha);
}

template <class I>
void pv_tile_f32(const float* p, int groups, int n, const float* const* vrow, float* ot, int dv, const float* alpha) {
  constexpr int W = I::W;
  int g = 0;
  for (; g + 2 <= groups; g += 2) {
    pv_groups_f32<I, 2, I::kPvDims2>(p + size_t(g) * kKeyTile * W, n, vrow, ot + size_t(g) * dv * W, dv,
                                     alpha + size_t(g) * W);
  }
  if (g < groups) {
    pv_groups_f32<I, 1, I::kPvDims1>(p + size_t(g) * kKeyTile * W, n, vrow, ot + size_t(g) * dv * W, dv,
                                     alpha + size_t(g) * W);
  }
}

// ---------------------------------------------------------------------------
// Masked keys and non-finite values (docs/mla.md, "NaN and inf"). A key
// masked for a lane has P = 0 there, but 0 * NaN (or inf) is NaN: the output
// product of a tile whose last keys some lane may not see (the causal
// diagonal) runs at full speed only over the keys every lane sees; the rest
// go through pv_masked_tail, which adds a key to the lanes that see it only
// when its values are not all finite (the same FMAs in the same order as
// pv_tile otherwise, so finite data gives the same bits either way).

// The smallest key end of the lanes that see any key from `start` on (the
// others are padding lanes, or decode lanes that see nothing of this split:
// their results are discarded or weigh nothing, LSE -inf). Keys at or past
// it are masked for some lane.
inline int visible_min_end(const int32_t* lane_end, int lanes, int start) {
  int end = 0x7fffffff;
  for (int i = 0; i < lanes; ++i) {
    if (lane_end[i] > start) end = imin(end, lane_end[i]);
  }
  return end;
}

// Keys [kk_begin, n) of the tile at key k0: OT[g][d] += P[g][kk] * V[kk][d]
// for the lanes that see key k0 + kk (all lanes when V[kk] is finite: P is 0
// where masked). p [G][kKeyTile][W]; value(kk, d) -> V[kk][d] as f32.
template <class I, class Value>
void pv_masked_tail(const float* p, int groups, int kk_begin, int n, int k0, const int32_t* lane_end, float* ot,
                    int dv, Value value) {
  constexpr int W = I::W;
  for (int kk = kk_begin; kk < n; ++kk) {
    bool finite = true;
    for (int d = 0; d < dv; ++d) finite = finite && __builtin_isfinite(value(kk, d));
    for (int g = 0; g < groups; ++g) {
      const float* pk = p + (size_t(g) * kKeyTile + kk) * W;
      float* og = ot + size_t(g) * dv * W;
      if (finite) {
        const typename I::F pv = I::load(pk);
        for (int d = 0; d < dv; ++d) {
          I::store(og + size_t(d) * W, I::fma(I::set1(value(kk, d)), pv, I::load(og + size_t(d) * W)));
        }
        continue;
      }
      for (int i = 0; i < W; ++i) {
        if (k0 + kk >= lane_end[g * W + i]) continue;  // masked here: contributes nothing
        for (int d = 0; d < dv; ++d) og[size_t(d) * W + i] = __builtin_fmaf(value(kk, d), pk[i], og[size_t(d) * W + i]);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Online softmax over one key tile (keys k0 .. k0+n-1), per group:
//   x = S * c (masked to -inf where key >= lane_end), m_new = max(m, max x),
//   alpha = 2^(m - m_new), P = 2^(x - m_new), l = l * alpha + sum P.
// A lane that has seen no key keeps m = -inf; its P and alpha are then 0
// (m_new is taken as 0 in the exponent), so it ends with l = 0.
// s [G][kKeyTile][W] holds S on entry and P on return.

struct SoftmaxState {
  float* m;            // [G][W] running max of x (log2 units)
  float* l;            // [G][W] running sum of P
  float* alpha;        // [G][W] this tile's rescale factor
  const int32_t* lane_end;   // [G][W] keys [0, lane_end) visible to the lane
  const int32_t* group_min_end;  // [G] smallest lane_end of the group
};

template <class I>
void softmax_tile(float* s, int groups, int n, int k0, float c, const SoftmaxState& st) {
  using F = typename I::F;
  constexpr int W = I::W;
  const F cv = I::set1(c);
  for (int g = 0; g < groups; ++g) {
    float* sg = s + size_t(g) * kKeyTile * W;
    const int32_t* le = st.lane_end + size_t(g) * W;
    const bool masked = k0 + n > st.group_min_end[g];
    F tile_max = I::set1(kNegInf);
    for (int kk = 0; kk < n; ++kk) {
      F x = I::mul(I::load(sg + size_t(kk) * W), cv);
      if (masked) x = I::mask_keys(x, le, k0 + kk);
      I::store(sg + size_t(kk) * W, x);
      tile_max = I::max(tile_max, x);
    }
    const F m_old = I::load(st.m + size_t(g) * W);
    const F m_new = I::max(m_old, tile_max);
    const F m_use = I::neg_inf_to_zero(m_new);
    const F alpha = I::exp2(I::sub(m_old, m_use));
    F sum = I::zero();
    for (int kk = 0; kk < n; ++kk) {
      const F p = I::exp2(I::sub(I::load(sg + size_t(kk) * W), m_use));
      I::store(sg + size_t(kk) * W, p);
      sum = I::add(sum, p);
    }
    I::store(st.l + size_t(g) * W, I::fma(I::load(st.l + size_t(g) * W), alpha, sum));
    I::store(st.m + size_t(g) * W, m_new);
    I::store(st.alpha + size_t(g) * W, alpha);
  }
}

// Lane bookkeeping shared by prefill and decode: lane_end per lane (0 or
// key_begin for padding lanes), each group's smallest end, and the largest.
inline int finish_lane_ends(const int32_t* lane_end, int groups, int w, int32_t* group_min_end) {
  int kmax = 0;
  for (int g = 0; g < groups; ++g) {
    int gmin = lane_end[g * w];
    for (int i = 0; i < w; ++i) {
      gmin = imin(gmin, lane_end[g * w + i]);
      kmax = imax(kmax, lane_end[g * w + i]);
    }
    group_min_end[g] = gmin;
  }
  return kmax;
}

template <class I>
void init_state(int groups, float* m, float* l, float* ot, int dv) {
  constexpr int W = I::W;
  for (int i = 0; i < groups * W; i += W) {
    I::store(m + i, I::set1(kNegInf));
    I::store(l + i, I::zero());
  }
  for (size_t i = 0; i < size_t(groups) * dv * W; i += W) I::store(ot + i, I::zero());
}

// Group g's W output rows, normalized and times out_scale, into rows
// [W][dv] (row i = lane g * W + i), and their natural-log LSEs into lse[W]
// (-inf with a zero row for a lane that saw no key). The accumulators are
// scaled in place, then turned into rows W x W blocks at a time.
template <class I>
void finalize_group(float* ot, const float* m, const float* l, int g, int dv, float out_scale, float* rows,
                    float* lse) {
  constexpr int W = I::W;
  float* og = ot + size_t(g) * dv * W;
  alignas(64) float inv[W];
  for (int i = 0; i < W; ++i) {
    // No key: 0 and -inf. A NaN sum (the lane attended to a NaN, or its
    // scores overflowed): NaN output and LSE, never a finite 0.
    const float sum = l[g * W + i];
    inv[i] = sum == 0.f ? 0.f : out_scale / sum;
    lse[i] = sum == 0.f ? kNegInf : (m[g * W + i] + __builtin_log2f(sum)) * kLn2;
  }
  const typename I::F invv = I::load(inv);
  for (int d = 0; d < dv; ++d) I::store(og + size_t(d) * W, I::mul(I::load(og + size_t(d) * W), invv));
  int d0 = 0;
  for (; d0 + W <= dv; d0 += W) I::transpose(og + size_t(d0) * W, W, rows + d0, dv);
  for (; d0 < dv; ++d0) {
    for (int i = 0; i < W; ++i) rows[size_t(i) * dv + d0] = og[size_t(d0) * W + i];
  }
}

// ---------------------------------------------------------------------------
// Prefill, f32 FMA path.

struct PrefillScratchF32 {
  float* qt;        // [G][dqk][W]
  float* s;         // [G][kKeyTile][W]
  float* ot;        // [G][dv][W]
  float *m, *l, *alpha;  // [G][W]
  int32_t* lane_end;     // [G][W]
  int32_t* group_min_end;  // [G]
  float* row;       // [W][max(dqk, dv)]: a query row, or a group's output rows
  float* lse;       // [W]
  const float** krow;  // [kKeyTile]
  const float** vrow;  // [kKeyTile]

  PrefillScratchF32(Arena& a, int groups, int w, int dqk, int dv) {
    qt = a.take<float>(size_t(groups) * dqk * w);
    s = a.take<float>(size_t(groups) * kKeyTile * w);
    ot = a.take<float>(size_t(groups) * dv * w);
    m = a.take<float>(size_t(groups) * w);
    l = a.take<float>(size_t(groups) * w);
    alpha = a.take<float>(size_t(groups) * w);
    lane_end = a.take<int32_t>(size_t(groups) * w);
    group_min_end = a.take<int32_t>(size_t(groups));
    row = a.take<float>(size_t(w) * imax(dqk, dv));
    lse = a.take<float>(size_t(w));
    krow = a.take<const float*>(kKeyTile);
    vrow = a.take<const float*>(kKeyTile);
  }
};

// Query rows of a prefill tile, transposed to [G][dim][W] f32 (zero lanes past `rows`).
// Bytes of a tile's packed f32 queries: [tile_rows / W][dqk][W].
template <class I>
size_t prefill_query_bytes_f32(int tile_rows, int dqk) {
  return size_t(div_up(tile_rows, I::W)) * dqk * I::W * 4;
}

template <class I>
void pack_queries_f32(const PrefillTileJob& job, int groups, float* row, float* qt) {
  constexpr int W = I::W;
  const size_t esize = job.q_dtype == DType::f32 ? 4 : 2;
  for (int lane = 0; lane < groups * W; ++lane) {
    const int g = lane / W, i = lane % W;
    if (lane < job.rows) {
      I::to_f32(static_cast<const char*>(job.q) + size_t(lane) * job.q_stride * esize, job.q_dtype, job.dqk, row);
    } else {
      for (int d = 0; d < job.dqk; ++d) row[d] = 0.f;
    }
    float* dst = qt + size_t(g) * job.dqk * W + i;
    for (int d = 0; d < job.dqk; ++d) dst[size_t(d) * W] = row[d];
  }
}

// f32 -> fp8 e4m3 (OCP "e4m3fn"): round to nearest even, saturating at
// +-448, NaN kept; the same results as lattn::f32_to_fp8e4m3, which this
// file may not call (see the top of the file).
inline uint8_t encode_fp8_e4m3(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);   // NaN
  if (a >= 0x43e80000u) return uint8_t(sign | 0x7eu);  // >= 464 or inf: 448
  if (a < 0x3c800000u) {                                // below 2^-6: subnormal steps of 2^-9
    float mag;
    __builtin_memcpy(&mag, &a, 4);
    return uint8_t(sign | uint8_t(__builtin_nearbyint(double(mag) * 512.0)));
  }
  const uint32_t rounded = a + 0x7ffffu + ((a >> 20) & 1u);
  uint32_t bits = (rounded - 0x3c000000u) >> 20;
  if (bits > 0x7eu) bits = 0x7eu;
  return uint8_t(sign | bits);
}

// The tile's output rows (and LSEs) from the accumulators; rows [W][dv] and
// lse [W] are scratch.
template <class I>
void prefill_write_rows(const PrefillTileJob& job, float* ot, const float* m, const float* l, float* rows,
                        float* lse) {
  constexpr int W = I::W;
  const size_t esize = dtype_bytes(job.out_dtype);
  for (int g = 0; g * W < job.rows; ++g) {
    finalize_group<I>(ot, m, l, g, job.dv, 1.f, rows, lse);
    for (int i = 0; i < W && g * W + i < job.rows; ++i) {
      const int lane = g * W + i;
      const float* row = rows + size_t(i) * job.dv;
      char* dst = static_cast<char*>(job.out) + size_t(lane) * job.out_stride * esize;
      if (job.out_dtype == DType::fp8_e4m3) {
        for (int d = 0; d < job.dv; ++d) reinterpret_cast<uint8_t*>(dst)[d] = encode_fp8_e4m3(row[d] / job.out_scale);
      } else {
        I::from_f32(row, job.dv, job.out_dtype, dst);
      }
      if (job.lse) job.lse[size_t(lane) * job.lse_stride] = lse[i];
    }
  }
}

// Lane ends of a prefill tile: causal rows see their own prefix, others all keys.
inline int prefill_lane_ends(const PrefillTileJob& job, int groups, int w, int32_t* lane_end, int32_t* group_min_end) {
  for (int lane = 0; lane < groups * w; ++lane) {
    int end = 0;
    if (lane < job.rows) end = job.causal ? imin(job.first_row + lane + 1, job.num_keys) : job.num_keys;
    lane_end[lane] = end;
  }
  return finish_lane_ends(lane_end, groups, w, group_min_end);
}

// pack_prefill_queries of the f32 path: the tile's groups, zero lanes past
// job.rows, at dst; job.scratch holds the conversion row.
template <class I>
void pack_prefill_queries_f32(const PrefillTileJob& job, void* dst) {
  pack_queries_f32<I>(job, div_up(job.rows, I::W), static_cast<float*>(job.scratch), static_cast<float*>(dst));
}

template <class I>
size_t prefill_scratch_bytes_f32(int tile_rows, int dqk, int dv) {
  Arena a(nullptr);
  PrefillScratchF32 layout(a, div_up(tile_rows, I::W), I::W, dqk, dv);
  return a.used();
}

template <class I>
void prefill_tile_f32(const PrefillTileJob& job) {
  constexpr int W = I::W;
  const int groups = div_up(job.rows, W);
  Arena arena(job.scratch);
  PrefillScratchF32 sc(arena, groups, W, job.dqk, job.dv);
  const float* qt = static_cast<const float*>(job.q_packed);
  if (!qt) {
    pack_queries_f32<I>(job, groups, sc.row, sc.qt);
    qt = sc.qt;
  }
  const int kmax = prefill_lane_ends(job, groups, W, sc.lane_end, sc.group_min_end);
  const int min_end = visible_min_end(sc.lane_end, groups * W, 0);
  init_state<I>(groups, sc.m, sc.l, sc.ot, job.dv);
  const SoftmaxState st{sc.m, sc.l, sc.alpha, sc.lane_end, sc.group_min_end};
  const float c = job.scale * kLog2e;
  const float* k = static_cast<const float*>(job.k);
  const float* v = static_cast<const float*>(job.v);
  for (int k0 = 0; k0 < kmax; k0 += kKeyTile) {
    const int n = imin(kKeyTile, kmax - k0);
    for (int kk = 0; kk < n; ++kk) {
      sc.krow[kk] = k + size_t(k0 + kk) * job.k_stride;
      sc.vrow[kk] = v + size_t(k0 + kk) * job.v_stride;
    }
    qk_tile_f32<I>(qt, groups, job.dqk, sc.krow, n, sc.s);
    softmax_tile<I>(sc.s, groups, n, k0, c, st);
    const int n_all = imax(0, imin(n, min_end - k0));  // keys every lane sees
    pv_tile_f32<I>(sc.s, groups, n_all, sc.vrow, sc.ot, job.dv, sc.alpha);
    if (n_all < n) {
      pv_masked_tail<I>(sc.s, groups, n_all, n, k0, sc.lane_end, sc.ot, job.dv,
                        [&](int kk, int d) { return sc.vrow[kk][d]; });
    }
  }
  prefill_write_rows<I>(job, sc.ot, sc.m, sc.l, sc.row, sc.lse);
}

// ---------------------------------------------------------------------------
// Decode, f32 FMA path: each tile's cache rows are converted to f32 once and
// then serve every lane (all heads and query tokens of the request).

struct DecodeScratchF32 {
  float* qt;        // [G][L+R][W]
  float* s;         // [G][kKeyTile][W]
  float* ot;        // [G][L][W]
  float *m, *l, *alpha;
  int32_t* lane_end;
  int32_t* group_min_end;
  float* row;       // [W][L+R]: a query row, or a group's output rows
  float* lse;       // [W]
  float* keys;      // [kKeyTile][L+R] the tile's cache rows in f32
  const float** krow;  // [kKeyTile]
  const char** rows;       // [kKeyTile] this tile's cache rows
  const char** next_rows;  // [kKeyTile] the next tile's, being prefetched

  DecodeScratchF32(Arena& a, int groups, int w, int latent, int rope) {
    const int dim = latent + rope;
    qt = a.take<float>(size_t(groups) * dim * w);
    s = a.take<float>(size_t(groups) * kKeyTile * w);
    ot = a.take<float>(size_t(groups) * latent * w);
    m = a.take<float>(size_t(groups) * w);
    l = a.take<float>(size_t(groups) * w);
    alpha = a.take<float>(size_t(groups) * w);
    lane_end = a.take<int32_t>(size_t(groups) * w);
    group_min_end = a.take<int32_t>(size_t(groups));
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

// The split's partial results (rows [W][L] and lse [W] are scratch).
template <class I>
void decode_write_partials(const DecodeSplitJob& job, float* ot, const float* m, const float* l, float* rows,
                           float* lse) {
  constexpr int W = I::W;
  const int lanes = job.s_q * job.num_heads, latent = job.kv_lora_rank;
  for (int g = 0; g * W < lanes; ++g) {
    finalize_group<I>(ot, m, l, g, latent, job.cache_scale, rows, lse);
    for (int i = 0; i < W && g * W + i < lanes; ++i) {
      __builtin_memcpy(job.o + size_t(g * W + i) * latent, rows + size_t(i) * latent, size_t(latent) * 4);
      job.lse[g * W + i] = lse[i];
    }
  }
}

template <class I>
size_t decode_scratch_bytes_f32(int lanes, int latent, int rope) {
  Arena a(nullptr);
  DecodeScratchF32 layout(a, div_up(lanes, I::W), I::W, latent, rope);
  return a.used();
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
  const int kmax = decode_lane_ends(job, groups, W, sc.lane_end, sc.group_min_end);
  const int min_end = visible_min_end(sc.lane_end, groups * W, job.key_begin);
  init_state<I>(groups, sc.m, sc.l, sc.ot, job.kv_lora_rank);
  const SoftmaxState st{sc.m, sc.l, sc.alpha, sc.lane_end, sc.group_min_end};
  // fp8: S = q · (stored * scale) = scale * (q · stored); O likewise.
  const float c = job.scale * job.cache_scale * kLog2e;
  tile_rows(job, job.key_begin, imin(kKeyTile, kmax - job.key_begin), sc.rows);
  for (int k0 = job.key_begin; k0 < kmax; k0 += kKeyTile) {
    const int n = imin(kKeyTile, kmax - k0);
    RowPrefetcher pf = next_tile_prefetcher(
        job, k0, kmax, score_steps(n, groups, dim, I::kQkKeys2, I::kQkKeys1), sc.next_rows);
    for (int kk = 0; kk < n; ++kk) {
      float* dst = sc.keys + size_t(kk) * dim;
      I::to_f32(sc.rows[kk], job.cache_dtype, dim, dst);
      sc.krow[kk] = dst;
    }
    qk_tile_f32<I>(sc.qt, groups, dim, sc.krow, n, sc.s, &pf);
    softmax_tile<I>(sc.s, groups, n, k0, c, st);
    const int n_all = imax(0, imin(n, min_end - k0));  // keys every lane sees (s_q > 1: not the last s_q - 1)
    pv_tile_f32<I>(sc.s, groups, n_all, sc.krow, sc.ot, job.kv_lora_rank, sc.alpha);
    if (n_all < n) {
      pv_masked_tail<I>(sc.s, groups, n_all, n, k0, sc.lane_end, sc.ot, job.kv_lora_rank,
                        [&](int kk, int d) { return sc.krow[kk][d]; });
    }
    const char** done = sc.rows;
    sc.rows = sc.next_rows;
    sc.next_rows = done;
  }
  decode_write_partials<I>(job, sc.ot, sc.m, sc.l, sc.row, sc.lse);
}

}  // namespace
}  // namespace lattn::cpu
