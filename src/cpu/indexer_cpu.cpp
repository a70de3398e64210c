// The lightning indexer on the host (src/cpu/indexer_cpu.h): the key cache
// write, the logits (fp64 reference; a fast path through the bf16 or f32
// GEMM), and a deterministic radix top-k.
//
// Fast logits: a key's scale is positive, so
//   Σ_h w_h · relu(q_h · (k8 · s)) = s · Σ_h w_h · relu(q_h · k8),
// and the fp8 values k8 are exact in bf16: a chunk of keys is widened from
// fp8 by table lookup and multiplied with all heads' queries in one GEMM
// ([chunk, D] · [D, H]), then reduced over heads.
#include "cpu/indexer_cpu.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/ops/gemm.h"
#include "cpu/gemm_paths.h"
#include "cpu/host_workspace.h"
#include "lattn/dtype.h"

namespace lattn::cpu {
namespace {

constexpr int kChunk = 1024;  // positions per GEMM

const uint8_t* key_entry(const IndexerKeyCache& c, const IndexerArgs& a, const IndexerTokens& tok, int t, int64_t p) {
  const int r = tok.request[size_t(t)];
  const int64_t bs = c.block_size();
  const int32_t block =
      a.block_table.data_as<const int32_t>()[r * a.block_table.stride(0) + (p / bs) * a.block_table.stride(1)];
  return static_cast<const uint8_t*>(c.data.data()) + block * c.data.stride(0) + (p % bs) * c.data.stride(1);
}

float entry_scale(const uint8_t* e, int D) {
  float s;
  std::memcpy(&s, e + D, 4);
  return s;
}

struct Tables {
  std::array<float, 256> f32;
  std::array<uint16_t, 256> bf16;  // exact: e4m3 has 3 mantissa bits, bf16 7
  Tables() {
    for (int i = 0; i < 256; ++i) {
      f32[size_t(i)] = fp8e4m3_to_f32(uint8_t(i));
      bf16[size_t(i)] = uint16_t(f32_bits(f32[size_t(i)]) >> 16);
    }
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}

// Logits of positions [p0, p0 + n) of token t into logits[p0 ...].
void logits_chunk(const IndexerArgs& a, const IndexerKeyCache& c, const IndexerTokens& tok, int t, int64_t p0, int n,
                  float* logits) {
  const int H = int(a.q.size(1)), D = c.head_dim;
  const bool bf16 = a.q.dtype() == DType::bf16;
  const Tables& tb = tables();
  thread_local HostWorkspace keys_ws, q_ws, dots_ws;
  void* keys = keys_ws.reserve(size_t(kChunk) * D * 4);
  float* dots = static_cast<float*>(dots_ws.reserve(size_t(kChunk) * H * 4));
  float scales[kChunk];
  for (int i = 0; i < n; ++i) {
    const uint8_t* e = key_entry(c, a, tok, t, p0 + i);
    scales[i] = entry_scale(e, D);
    if (bf16) {
      uint16_t* dst = static_cast<uint16_t*>(keys) + size_t(i) * D;
      for (int d = 0; d < D; ++d) dst[d] = tb.bf16[e[d]];
    } else {
      float* dst = static_cast<float*>(keys) + size_t(i) * D;
      for (int d = 0; d < D; ++d) dst[d] = tb.f32[e[d]];
    }
  }
  const char* q_row = static_cast<const char*>(a.q.data()) + t * a.q.stride(0) * a.q.element_size();
  const void* q = q_row;
  int64_t ldq = a.q.stride(1);
  DType q_dtype = a.q.dtype();
  if (!bf16) {  // f16 / f32 queries: widened to f32 (OpenBLAS path)
    float* qf = static_cast<float*>(q_ws.reserve(size_t(H) * D * 4));
    for (int h = 0; h < H; ++h) {
      for (int d = 0; d < D; ++d) qf[h * D + d] = load_as_f32(q_row, q_dtype, h * a.q.stride(1) + d);
    }
    q = qf, ldq = D, q_dtype = DType::f32;
  }
  detail::GemmProblem g;
  g.m = n, g.n = H, g.k = D;
  g.a = keys, g.a_dtype = bf16 ? DType::bf16 : DType::f32, g.lda = D;
  g.b = q, g.b_dtype = q_dtype, g.ldb = ldq, g.trans_b = true;  // B(k=d, n=h) = q[h, d]
  g.c = dots, g.c_dtype = DType::f32, g.ldc = H;
  RunContext one;
  one.num_threads = 1;
  detail::cpu_gemm(g, one);
  const float* w = a.weights.data_as<const float>() + t * a.weights.stride(0);
  const int64_t ws = a.weights.stride(1);
  for (int i = 0; i < n; ++i) {
    const float* row = dots + size_t(i) * H;
    float acc = 0.f;
    for (int h = 0; h < H; ++h) acc += w[h * ws] * std::max(row[h], 0.f);
    logits[p0 + i] = acc * scales[i];
  }
}

// Order-preserving 32-bit key of a logit: larger key = larger value; NaN is
// the smallest key of all; -0 and +0 are one value.
uint32_t sort_key(float v) {
  if (std::isnan(v)) return 0;
  if (v == 0.f) v = 0.f;
  const uint32_t u = f32_bits(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace

void indexer_k_cache_write(const Tensor& k, const IndexerKeyCache& cache, const Tensor& slot_mapping) {
  const int D = cache.head_dim;
  const int64_t bs = cache.block_size();
  std::vector<float> x(static_cast<size_t>(D));
  for (int64_t t = 0; t < slot_mapping.size(0); ++t) {
    const int64_t slot = slot_mapping.data_as<const int64_t>()[t * slot_mapping.stride(0)];
    if (slot < 0) continue;
    float amax = 0.f;
    for (int d = 0; d < D; ++d) {
      x[size_t(d)] = load_as_f32(k.data(), k.dtype(), t * k.stride(0) + d);
      if (std::isfinite(x[size_t(d)])) amax = std::fmax(amax, std::fabs(x[size_t(d)]));
    }
    const float scale = std::fmax(amax / 448.f, FLT_MIN);  // as fp8_ds_mla's tiles
    uint8_t* e = static_cast<uint8_t*>(cache.data.data()) + (slot / bs) * cache.data.stride(0) +
                 (slot % bs) * cache.data.stride(1);
    for (int d = 0; d < D; ++d) e[d] = f32_to_fp8e4m3(x[size_t(d)] / scale);
    std::memcpy(e + D, &scale, 4);
  }
}

void indexer_token_logits_reference(const IndexerArgs& a, const IndexerKeyCache& c, const IndexerTokens& tok, int t,
                                    float* logits) {
  const int H = int(a.q.size(1)), D = c.head_dim;
  std::vector<double> q(static_cast<size_t>(H) * D);
  for (int h = 0; h < H; ++h) {
    for (int d = 0; d < D; ++d)
      q[size_t(h) * D + d] = load_as_f32(a.q.data(), a.q.dtype(), t * a.q.stride(0) + h * a.q.stride(1) + d);
  }
  const float* w = a.weights.data_as<const float>() + t * a.weights.stride(0);
  for (int64_t p = 0; p <= tok.position[size_t(t)]; ++p) {
    const uint8_t* e = key_entry(c, a, tok, t, p);
    const double s = entry_scale(e, D);
    double logit = 0;
    for (int h = 0; h < H; ++h) {
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += q[size_t(h) * D + d] * double(fp8e4m3_to_f32(e[d])) * s;
      logit += double(w[h * a.weights.stride(1)]) * std::max(dot, 0.0);
    }
    logits[p] = float(logit);
  }
}

void indexer_token_logits_cpu(const IndexerArgs& a, const IndexerKeyCache& c, const IndexerTokens& tok, int t,
                              float* logits, int threads) {
  const int64_t n = int64_t(tok.position[size_t(t)]) + 1;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t p0 = i * kChunk;
    logits_chunk(a, c, tok, t, p0, int(std::min<int64_t>(kChunk, n - p0)), logits);
  }
}

void topk_one_row(const float* logits, int n, int k, int32_t* out) {
  // References bound once: each thread_local access in a shared library is a
  // __tls_get_addr call, too slow inside the sort's comparator.
  thread_local std::vector<uint32_t> tls_keys;
  thread_local std::vector<int32_t> tls_hist, tls_chosen;
  std::vector<uint32_t>& keys = tls_keys;
  std::vector<int32_t>& hist = tls_hist;
  std::vector<int32_t>& chosen = tls_chosen;
  keys.resize(size_t(n));
  for (int i = 0; i < n; ++i) keys[size_t(i)] = sort_key(logits[i]);
  chosen.clear();
  if (n <= k) {
    for (int i = 0; i < n; ++i) chosen.push_back(i);
  } else {
    // Radix selection of the k-th largest key τ, 16 bits at a time (high, then low).
    hist.assign(65536, 0);
    for (int i = 0; i < n; ++i) hist[keys[size_t(i)] >> 16]++;
    int need = k, hi = 65535;
    for (; hi > 0 && hist[size_t(hi)] < need; --hi) need -= hist[size_t(hi)];
    hist.assign(65536, 0);
    for (int i = 0; i < n; ++i) {
      if ((keys[size_t(i)] >> 16) == uint32_t(hi)) hist[keys[size_t(i)] & 0xffffu]++;
    }
    int lo = 65535;
    for (; lo > 0 && hist[size_t(lo)] < need; --lo) need -= hist[size_t(lo)];
    const uint32_t tau = (uint32_t(hi) << 16) | uint32_t(lo);
    // Everything above τ, then the first `need` equal to τ in position order.
    for (int i = 0; i < n; ++i) {
      if (keys[size_t(i)] > tau) chosen.push_back(i);
    }
    for (int i = 0; i < n && need > 0; ++i) {
      if (keys[size_t(i)] == tau) chosen.push_back(i), --need;
    }
  }
  std::sort(chosen.begin(), chosen.end(), [&keys](int32_t x, int32_t y) {
    const uint32_t kx = keys[size_t(x)], ky = keys[size_t(y)];
    return kx != ky ? kx > ky : x < y;
  });
  const int m = int(chosen.size());
  for (int i = 0; i < k; ++i) out[i] = i < m ? chosen[size_t(i)] : -1;
}

}  // namespace lattn::cpu
