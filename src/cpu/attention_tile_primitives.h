// src/cpu/attention_tile_primitives.h — the shared primitives of the `cpu`
// backend's flash-attention kernels (f32 FMA path; internal): tile sizes,
// scratch arena, the score (Q·K) and value (P·V) register blocks, the
// online-softmax update and the per-group state. The prefill tile
// (attention_prefill_tile.h) and the decode split (attention_decode_split.h)
// are written over these. The contract below holds for all three files.
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

// Bytes of scratch a Layout(arena, args...) takes (the *_scratch_bytes functions).
template <class Layout, class... Args>
size_t layout_bytes(Args... args) {
  Arena a(nullptr);
  Layout layout(a, args...);
  return a.used();
}

inline size_t dtype_bytes(DType t) { return t == DType::f32 ? 4 : (t == DType::fp8_e4m3 ? 1 : 2); }

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
void pv_masked_tail(const float* p, int groups, int kk_begin, int n, int k0, const int32_t* lane_end, float* ot, int dv,
                    Value value) {
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
  float* m;                      // [G][W] running max of x (log2 units)
  float* l;                      // [G][W] running sum of P
  float* alpha;                  // [G][W] this tile's rescale factor
  const int32_t* lane_end;       // [G][W] keys [0, lane_end) visible to the lane
  const int32_t* group_min_end;  // [G] smallest lane_end of the group
};

// The arrays behind a SoftmaxState for `groups` groups of w lanes, taken
// from a tile's scratch arena (every tile scratch layout holds one).
struct LaneStates {
  float *m, *l, *alpha;    // [G][W]
  int32_t* lane_end;       // [G][W]
  int32_t* group_min_end;  // [G]

  LaneStates() = default;
  LaneStates(Arena& a, int groups, int w) {
    m = a.take<float>(size_t(groups) * w);
    l = a.take<float>(size_t(groups) * w);
    alpha = a.take<float>(size_t(groups) * w);
    lane_end = a.take<int32_t>(size_t(groups) * w);
    group_min_end = a.take<int32_t>(size_t(groups));
  }
  SoftmaxState state() const { return {m, l, alpha, lane_end, group_min_end}; }
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

}  // namespace
}  // namespace lattn::cpu
