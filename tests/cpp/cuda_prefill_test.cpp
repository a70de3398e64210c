// The `cuda` and `hopper` prefill backends and their kernels (sm80; sm_90a)
// against plain float64 loops written here: random data, poisoned outputs,
// causal (new tokens) and non-causal (context chunks), varlen with unequal
// and zero lengths, head counts 1, 3 and 128, every supported (qk, v) pair,
// bf16 and f16, strided views, NaN in key rows no request owns. The backend
// tests run once per backend (parameter "cuda" / "hopper"); without a GPU
// (or without CUDA, or, for hopper, without an sm90 GPU) they skip with a
// one-line reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/backends/builtin_backends.h"
#include "cuda/sm80/prefill/prefill_config.h"
#include "cuda/sm80/prefill/prefill_launch.h"
#include "cuda/sm90/prefill/prefill_launch.h"
#include "lattn/backend.h"
#include "lattn/device.h"
#include "lattn/errors.h"
#include "support/backend_driver.h"
#include "support/test_data.h"

namespace lattn {
namespace {

namespace sm80 = cuda::sm80;
namespace sm90 = cuda::sm90;

const PrefillBackendClass* prefill_class(const std::string& name) {
  for (const auto& c : detail::builtin_prefill_classes())
    if (c->name() == name) return c.get();
  return nullptr;
}
const PrefillBackendClass* cuda_prefill_class() { return prefill_class("cuda"); }

// Empty when the GPU tests of `backend` can run, else the one-line reason to skip.
std::string gpu_skip_reason(const std::string& backend = "cuda") {
  const PrefillBackendClass* cls = prefill_class(backend);
  if (cls == nullptr) return "lattn was built without CUDA (no `" + backend + "` prefill backend)";
  if (!cls->is_available()) return "this build has no `" + backend + "` prefill kernels (no sm_90a code)";
  const CudaDeviceQuery q = query_cuda_devices();
  if (q.devices.empty()) return q.unavailable_reason;
  const DeviceCapability cap = q.devices[0].capability;
  if (cap.major < 8) return "the cuda prefill kernels need sm80+, device 0 is older";
  if (backend == "hopper" && !(cap.major == 9 && cap.minor == 0)) {
    return "the hopper prefill backend needs an sm90 GPU, device 0 is " + std::to_string(cap.major) + "." +
           std::to_string(cap.minor);
  }
  return "";
}

#define SKIP_WITHOUT_GPU_FOR(backend)                     \
  do {                                                    \
    const std::string reason_ = gpu_skip_reason(backend); \
    if (!reason_.empty()) GTEST_SKIP() << reason_;        \
  } while (0)
#define SKIP_WITHOUT_GPU() SKIP_WITHOUT_GPU_FOR("cuda")

// ---- the float64 reference -------------------------------------------------

struct AttentionShape {
  int heads = 1;
  int dqk = 192;
  int dv = 128;
  float scale = 0.f;
  bool causal = false;  // bottom-right aligned: query i sees keys j <= i + sk - sq
  std::vector<int32_t> cu_q, cu_k;
};

// A [rows, H, D] host tensor of any float dtype and strides as contiguous f64.
std::vector<double> to_f64(const Tensor& t) {
  std::vector<double> r(size_t(t.size(0) * t.size(1) * t.size(2)));
  size_t i = 0;
  for (int64_t a = 0; a < t.size(0); ++a)
    for (int64_t b = 0; b < t.size(1); ++b)
      for (int64_t c = 0; c < t.size(2); ++c)
        r[i++] = load_as_f32(t.data(), t.dtype(), a * t.stride(0) + b * t.stride(1) + c * t.stride(2));
  return r;
}

// q [Tq, H, Dqk], k [Tk, H, Dqk], v [Tk, H, Dv] host (any float dtype and
// strides); out [Tq, H, Dv] and lse [H, Tq] host f32, written. Rows of a
// query that sees no key: out 0, lse -inf.
void reference_attention(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const AttentionShape& s,
                         const Tensor& out, const Tensor& lse) {
  const std::vector<double> q = to_f64(q_t), k = to_f64(k_t), v = to_f64(v_t);
  const int batch = int(s.cu_q.size()) - 1;
  const int heads = s.heads, dqk = s.dqk, dv = s.dv;
  float* o = out.data_as<float>();
  float* l = lse.data_as<float>();
  const int64_t tq = out.size(0);
  for (int b = 0; b < batch; ++b) {
    const int sq = s.cu_q[b + 1] - s.cu_q[b];
    const int sk = s.cu_k[b + 1] - s.cu_k[b];
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < sq; ++i) {
        const int64_t qi = s.cu_q[b] + i;
        const int visible = s.causal ? std::clamp(i + sk - sq + 1, 0, sk) : sk;
        std::vector<double> score(static_cast<size_t>(visible)), acc(static_cast<size_t>(dv), 0.0);
        double mx = -std::numeric_limits<double>::infinity();
        const double* qrow = &q[size_t((qi * heads + h) * dqk)];
        for (int j = 0; j < visible; ++j) {
          const double* krow = &k[size_t(((s.cu_k[b] + j) * heads + h) * dqk)];
          double dot = 0;
          for (int d = 0; d < dqk; ++d) dot += qrow[d] * krow[d];
          score[size_t(j)] = dot * s.scale;
          mx = std::max(mx, score[size_t(j)]);
        }
        double sum = 0;
        for (int j = 0; j < visible; ++j) {
          const double p = std::exp(score[size_t(j)] - mx);
          sum += p;
          const double* vrow = &v[size_t(((s.cu_k[b] + j) * heads + h) * dv)];
          for (int d = 0; d < dv; ++d) acc[size_t(d)] += p * vrow[d];
        }
        for (int d = 0; d < dv; ++d) o[(qi * heads + h) * dv + d] = visible ? float(acc[size_t(d)] / sum) : 0.f;
        l[h * tq + qi] = visible ? float(mx + std::log(sum)) : -std::numeric_limits<float>::infinity();
      }
  }
}

// ---- device data -------------------------------------------------------------

OwnedTensor upload(const Tensor& host) {
  OwnedTensor d = OwnedTensor::empty(host.shape(), host.dtype(), Device::cuda(0));
  copy_tensor(host, d.tensor());
  return d;
}

OwnedTensor random_host(std::initializer_list<int64_t> shape, DType dtype, std::mt19937_64& rng, float stddev) {
  OwnedTensor t = OwnedTensor::empty(shape, dtype);
  test::fill_normal(t.tensor(), rng, stddev);
  return t;
}

// Host int32 [n] from a vector.
OwnedTensor host_i32(const std::vector<int32_t>& values) {
  OwnedTensor t = OwnedTensor::empty({int64_t(values.size())}, DType::i32);
  std::copy(values.begin(), values.end(), t.data_as<int32_t>());
  return t;
}

// Checks the device out / lse against the reference.
void expect_matches(const Tensor& out_dev, const Tensor& lse_dev, const Tensor& ref_out, const Tensor& ref_lse,
                    DType dtype, const std::string& what) {
  const OwnedTensor out = test::to_host_f32(out_dev);
  const test::ErrorReport e = test::compare(out.tensor(), ref_out);
  EXPECT_EQ(e.nan_mismatches, 0) << what << " out: " << e.str();
  EXPECT_LE(e.rel_l2, test::rel_tolerance(dtype)) << what << " out: " << e.str();
  if (lse_dev.defined()) {
    const OwnedTensor lse = test::to_host_f32(lse_dev);
    const test::ErrorReport el = test::compare(lse.tensor(), ref_lse);
    EXPECT_EQ(el.nan_mismatches, 0) << what << " lse: " << el.str();
    // LSE comes from f32 dot products of the same rounded inputs: only
    // accumulation-order error, far below the output's.
    EXPECT_LE(el.max_abs, 1e-3) << what << " lse: " << el.str();
  }
}

// ---- the backend through its public interface ---------------------------------

// A PrefillMetadata built by hand (the metadata builder is another
// module's): query_start_loc and one row of chunk cu_seq_lens per chunk.
struct HandMadeMetadata {
  OwnedTensor qsl_cpu, qsl, cu_cpu, cu;
  PrefillMetadata md;

  HandMadeMetadata(const std::vector<int32_t>& cu_q, const std::vector<std::vector<int32_t>>& chunk_cu_k) {
    const int batch = int(cu_q.size()) - 1;
    qsl_cpu = host_i32(cu_q);
    qsl = upload(qsl_cpu.tensor());
    md.num_prefills = batch;
    md.num_prefill_tokens = cu_q.back();
    for (int b = 0; b < batch; ++b) md.max_query_len = std::max(md.max_query_len, cu_q[b + 1] - cu_q[b]);
    md.query_start_loc_cpu = qsl_cpu.tensor();
    md.query_start_loc = qsl.tensor();
    if (!chunk_cu_k.empty()) {
      const int chunks = int(chunk_cu_k.size());
      cu_cpu = OwnedTensor::empty({chunks, batch + 1}, DType::i32);
      for (int c = 0; c < chunks; ++c) {
        std::copy(chunk_cu_k[c].begin(), chunk_cu_k[c].end(), cu_cpu.data_as<int32_t>() + c * (batch + 1));
        int longest = 0;
        for (int b = 0; b < batch; ++b) longest = std::max(longest, chunk_cu_k[c][b + 1] - chunk_cu_k[c][b]);
        md.chunks.max_seq_lens.push_back(longest);
        md.chunks.seq_tot.push_back(chunk_cu_k[c].back());
      }
      cu = upload(cu_cpu.tensor());
      md.chunks.num_chunks = chunks;
      md.chunks.cu_seq_lens_cpu = cu_cpu.tensor();
      md.chunks.cu_seq_lens = cu.tensor();
    }
  }
};

std::unique_ptr<PrefillBackend> make_backend(const std::string& backend, int heads, int nope, int rope, int dv,
                                             DType dtype, float scale) {
  PrefillBackendParams p;
  p.num_heads = heads;
  p.scale = scale;
  p.kv_lora_rank = 512;
  p.qk_nope_head_dim = nope;
  p.qk_rope_head_dim = rope;
  p.v_head_dim = dv;
  p.dtype = dtype;
  p.context.device = Device::cuda(0);
  return prefill_class(backend)->create(p);
}

struct NewTokensCase {
  int heads, nope, rope, dv;
  DType dtype;
  std::vector<int32_t> cu_q;
};

void run_new_tokens_case(const std::string& backend_name, const NewTokensCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int dqk = c.nope + c.rope;
  const int64_t t = c.cu_q.back();
  const float scale = 1.f / std::sqrt(float(dqk));
  // stddev 1.5 on q and k: logits of std ~2.25, a peaked softmax.
  const OwnedTensor q_h = random_host({t, c.heads, dqk}, c.dtype, rng, 1.5f);
  const OwnedTensor k_h = random_host({t, c.heads, dqk}, c.dtype, rng, 1.5f);
  const OwnedTensor v_h = random_host({t, c.heads, c.dv}, c.dtype, rng, 1.f);
  const OwnedTensor q = upload(q_h), k = upload(k_h), v = upload(v_h);
  const OwnedTensor out = OwnedTensor::empty({t, c.heads, c.dv}, c.dtype, Device::cuda(0));
  const OwnedTensor lse = OwnedTensor::empty({c.heads, t}, DType::f32, Device::cuda(0));
  test::poison(out.tensor());
  test::poison(lse.tensor());

  HandMadeMetadata meta(c.cu_q, {});
  auto backend = make_backend(backend_name, c.heads, c.nope, c.rope, c.dv, c.dtype, scale);
  backend->prepare_metadata(meta.md);
  backend->run_prefill_new_tokens(q, k, v, /*return_softmax_lse=*/true, out, lse);

  AttentionShape s{c.heads, dqk, c.dv, scale, /*causal=*/true, c.cu_q, c.cu_q};
  const OwnedTensor ref_out = OwnedTensor::empty({t, c.heads, c.dv}, DType::f32);
  const OwnedTensor ref_lse = OwnedTensor::empty({c.heads, t}, DType::f32);
  reference_attention(q_h, k_h, v_h, s, ref_out, ref_lse);
  expect_matches(out, lse, ref_out, ref_lse, c.dtype,
                 backend_name + " new tokens " + dtype_name(c.dtype) + " H" + std::to_string(c.heads) + " qk" +
                     std::to_string(dqk) + " v" + std::to_string(c.dv));
}

// The backend tests, once per backend: the parameter is its name.
class CudaPrefill : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& backend() const { return GetParam(); }
};

TEST_P(CudaPrefill, NewTokensCausalVarlenBf16) {
  SKIP_WITHOUT_GPU_FOR(backend());
  // Unequal lengths around the 128-row tile and 64-key block edges, a
  // zero-length request, and a single-token request.
  run_new_tokens_case(backend(), {3, 128, 64, 128, DType::bf16, {0, 1, 18, 18, 147, 403}}, 1);
}

TEST_P(CudaPrefill, NewTokensCausalVarlenF16) {
  SKIP_WITHOUT_GPU_FOR(backend());
  run_new_tokens_case(backend(), {1, 128, 64, 128, DType::f16, {0, 64, 65, 320}}, 2);
}

TEST_P(CudaPrefill, NewTokens128HeadsBf16) {
  SKIP_WITHOUT_GPU_FOR(backend());
  run_new_tokens_case(backend(), {128, 128, 64, 128, DType::bf16, {0, 70, 100}}, 3);
}

TEST_P(CudaPrefill, NewTokensMiniCpm3Dims) {
  SKIP_WITHOUT_GPU_FOR(backend());
  // MiniCPM3: qk_nope 64 + rope 32 = 96, v 64.
  run_new_tokens_case(backend(), {3, 64, 32, 64, DType::bf16, {0, 33, 290}}, 4);
  run_new_tokens_case(backend(), {1, 64, 32, 64, DType::f16, {0, 129}}, 5);
}

TEST_P(CudaPrefill, NewTokensQk256V256Dims) {
  SKIP_WITHOUT_GPU_FOR(backend());
  // qk_nope 192 + rope 64 = 256, v 256.
  run_new_tokens_case(backend(), {3, 192, 64, 256, DType::bf16, {0, 200, 231}}, 6);
  run_new_tokens_case(backend(), {1, 192, 64, 256, DType::f16, {0, 97}}, 7);
}

TEST_P(CudaPrefill, NewTokensWithoutLse) {
  SKIP_WITHOUT_GPU_FOR(backend());
  std::mt19937_64 rng(8);
  const std::vector<int32_t> cu_q = {0, 50, 90};
  const int64_t t = cu_q.back();
  const OwnedTensor q_h = random_host({t, 2, 192}, DType::bf16, rng, 1.f);
  const OwnedTensor k_h = random_host({t, 2, 192}, DType::bf16, rng, 1.f);
  const OwnedTensor v_h = random_host({t, 2, 128}, DType::bf16, rng, 1.f);
  const OwnedTensor q = upload(q_h), k = upload(k_h), v = upload(v_h);
  const OwnedTensor out = OwnedTensor::empty({t, 2, 128}, DType::bf16, Device::cuda(0));
  test::poison(out.tensor());
  HandMadeMetadata meta(cu_q, {});
  auto instance = make_backend(backend(), 2, 128, 64, 128, DType::bf16, 0.1f);
  instance->prepare_metadata(meta.md);
  instance->run_prefill_new_tokens(q, k, v, /*return_softmax_lse=*/false, out, Tensor());
  const OwnedTensor ref_out = OwnedTensor::empty({t, 2, 128}, DType::f32);
  const OwnedTensor ref_lse = OwnedTensor::empty({2, t}, DType::f32);
  reference_attention(q_h, k_h, v_h, {2, 192, 128, 0.1f, true, cu_q, cu_q}, ref_out, ref_lse);
  expect_matches(out, Tensor(), ref_out, ref_lse, DType::bf16, "new tokens without lse");
}

// Context chunks: non-causal, key rows from the chunk's cu_seq_lens, a
// request with no context in the chunk (0 keys: out 0, lse -inf), and NaN
// in the workspace rows past the chunk's last key, which must not be read.
TEST_P(CudaPrefill, ContextChunksNonCausalVarlen) {
  SKIP_WITHOUT_GPU_FOR(backend());
  std::mt19937_64 rng(9);
  const int heads = 3;
  const std::vector<int32_t> cu_q = {0, 5, 69, 198};
  const std::vector<std::vector<int32_t>> chunks = {{0, 200, 200, 277}, {0, 0, 64, 65}};
  const int64_t t = cu_q.back();
  const int64_t workspace = 300;
  const float scale = 1.f / std::sqrt(192.f);
  const OwnedTensor q_h = random_host({t, heads, 192}, DType::bf16, rng, 1.5f);
  const OwnedTensor q = upload(q_h);
  HandMadeMetadata meta(cu_q, chunks);
  auto instance = make_backend(backend(), heads, 128, 64, 128, DType::bf16, scale);
  instance->prepare_metadata(meta.md);
  for (int c = 0; c < int(chunks.size()); ++c) {
    const OwnedTensor k_h = random_host({workspace, heads, 192}, DType::bf16, rng, 1.5f);
    const OwnedTensor v_h = random_host({workspace, heads, 128}, DType::bf16, rng, 1.f);
    const int64_t used = chunks[c].back();
    fill(k_h.tensor().narrow(0, used, workspace - used), std::numeric_limits<float>::quiet_NaN());
    fill(v_h.tensor().narrow(0, used, workspace - used), std::numeric_limits<float>::quiet_NaN());
    const OwnedTensor k = upload(k_h), v = upload(v_h);
    const OwnedTensor out = OwnedTensor::empty({t, heads, 128}, DType::bf16, Device::cuda(0));
    const OwnedTensor lse = OwnedTensor::empty({heads, t}, DType::f32, Device::cuda(0));
    test::poison(out.tensor());
    test::poison(lse.tensor());
    instance->run_prefill_context_chunk(c, q, k, v, out, lse);

    const OwnedTensor ref_out = OwnedTensor::empty({t, heads, 128}, DType::f32);
    const OwnedTensor ref_lse = OwnedTensor::empty({heads, t}, DType::f32);
    reference_attention(q_h, k_h, v_h, {heads, 192, 128, scale, false, cu_q, chunks[c]}, ref_out, ref_lse);
    expect_matches(out, lse, ref_out, ref_lse, DType::bf16, "context chunk " + std::to_string(c));
  }
}

// vLLM's layout: k = [k_nope | k_pe] and v = kv[..., P:] are views with a
// head stride larger than the head dim; q and out are views too.
TEST_P(CudaPrefill, StridedViews) {
  SKIP_WITHOUT_GPU_FOR(backend());
  std::mt19937_64 rng(10);
  const int heads = 3;
  const std::vector<int32_t> cu_q = {0, 77, 211};
  const int64_t t = cu_q.back();
  const float scale = 0.09f;
  const OwnedTensor q_full_h = random_host({t, heads, 256}, DType::bf16, rng, 1.5f);
  const OwnedTensor k_full_h = random_host({t, heads, 200}, DType::bf16, rng, 1.5f);
  const OwnedTensor kv_h = random_host({t, heads, 256}, DType::bf16, rng, 1.f);  // [k_nope (128) | v (128)]
  const Tensor q_h = q_full_h.tensor().narrow(2, 64, 192);
  const Tensor k_h = k_full_h.tensor().narrow(2, 8, 192);
  const Tensor v_h = kv_h.tensor().narrow(2, 128, 128);
  const OwnedTensor q_full = upload(q_full_h), k_full = upload(k_full_h), kv = upload(kv_h);
  const Tensor q = q_full.tensor().narrow(2, 64, 192);
  const Tensor k = k_full.tensor().narrow(2, 8, 192);
  const Tensor v = kv.tensor().narrow(2, 128, 128);
  const OwnedTensor out_full = OwnedTensor::empty({t, heads, 136}, DType::bf16, Device::cuda(0));
  const OwnedTensor lse_full = OwnedTensor::empty({heads + 1, t}, DType::f32, Device::cuda(0));
  test::poison(out_full.tensor());
  test::poison(lse_full.tensor());
  const Tensor out = out_full.tensor().narrow(2, 8, 128);
  const Tensor lse = lse_full.tensor().narrow(0, 1, heads);

  HandMadeMetadata meta(cu_q, {});
  auto instance = make_backend(backend(), heads, 128, 64, 128, DType::bf16, scale);
  instance->prepare_metadata(meta.md);
  instance->run_prefill_new_tokens(q, k, v, true, out, lse);

  const OwnedTensor ref_out = OwnedTensor::empty({t, heads, 128}, DType::f32);
  const OwnedTensor ref_lse = OwnedTensor::empty({heads, t}, DType::f32);
  reference_attention(q_h, k_h, v_h, {heads, 192, 128, scale, true, cu_q, cu_q}, ref_out, ref_lse);
  const OwnedTensor got_full = test::to_host_f32(out_full.tensor());
  const OwnedTensor got_lse_full = test::to_host_f32(lse_full.tensor());
  const OwnedTensor got = OwnedTensor::empty({t, heads, 128}, DType::f32);
  const OwnedTensor got_lse = OwnedTensor::empty({heads, t}, DType::f32);
  copy_host(got_full.tensor().narrow(2, 8, 128), got.tensor());
  copy_host(got_lse_full.tensor().narrow(0, 1, heads), got_lse.tensor());
  const test::ErrorReport e = test::compare(got.tensor(), ref_out.tensor());
  EXPECT_EQ(e.nan_mismatches, 0) << e.str();
  EXPECT_LE(e.rel_l2, test::rel_tolerance(DType::bf16)) << e.str();
  const test::ErrorReport el = test::compare(got_lse.tensor(), ref_lse.tensor());
  EXPECT_LE(el.max_abs, 1e-3) << el.str();
  // Columns 0..7 of every (token, head) row lie outside the out view, and
  // lse row 0 outside the lse view: they stay poisoned (untouched).
  const float* raw = got_full.data_as<float>();
  int64_t touched = 0;
  for (int64_t row = 0; row < t * heads; ++row)
    for (int c = 0; c < 8; ++c) touched += !std::isnan(raw[row * 136 + c]);
  for (int64_t i = 0; i < t; ++i) touched += !std::isnan(got_lse_full.data_as<float>()[i]);
  EXPECT_EQ(touched, 0);
}

TEST_P(CudaPrefill, RejectsBadArgumentsBeforeWriting) {
  SKIP_WITHOUT_GPU_FOR(backend());
  std::mt19937_64 rng(11);
  const std::vector<int32_t> cu_q = {0, 10};
  const OwnedTensor q = upload(random_host({10, 2, 192}, DType::bf16, rng, 1.f));
  const OwnedTensor k = upload(random_host({10, 2, 192}, DType::bf16, rng, 1.f));
  const OwnedTensor v = upload(random_host({10, 2, 128}, DType::bf16, rng, 1.f));
  const OwnedTensor v16 = upload(random_host({10, 2, 128}, DType::f16, rng, 1.f));
  const OwnedTensor out = OwnedTensor::empty({10, 2, 128}, DType::bf16, Device::cuda(0));
  const OwnedTensor lse = OwnedTensor::empty({2, 10}, DType::f32, Device::cuda(0));
  const OwnedTensor lse_bad = OwnedTensor::empty({10, 2}, DType::f32, Device::cuda(0));
  auto instance = make_backend(backend(), 2, 128, 64, 128, DType::bf16, 0.1f);
  // No metadata yet.
  EXPECT_THROW(instance->run_prefill_new_tokens(q, k, v, true, out, lse), ValueError);
  HandMadeMetadata meta(cu_q, {});
  instance->prepare_metadata(meta.md);
  test::poison(out.tensor());
  EXPECT_THROW(instance->run_prefill_new_tokens(q, k, v16, true, out, lse), ValueError);
  EXPECT_THROW(instance->run_prefill_new_tokens(q, k, v, true, out, lse_bad), ValueError);
  EXPECT_THROW(instance->run_prefill_new_tokens(q, k.tensor().narrow(0, 0, 9), v, true, out, lse), ValueError);
  const OwnedTensor scale = OwnedTensor::empty({1}, DType::f32, Device::cuda(0));
  EXPECT_THROW(instance->run_prefill_new_tokens(q, k, v, true, out, lse, scale), NotImplementedError);
  EXPECT_THROW(instance->run_prefill_context_chunk(0, q, k, v, out, lse), ValueError);  // no chunks planned
  try {
    instance->run_prefill_new_tokens(q, k, v16, true, out, lse);
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'v'"), std::string::npos) << e.what();
  }
  // Nothing was written by the refused calls.
  const OwnedTensor host = test::to_host_f32(out.tensor());
  for (int64_t i = 0; i < host.tensor().numel(); ++i) ASSERT_TRUE(std::isnan(host.data_as<float>()[i]));
}

// ---- the kernels directly: bottom-right causal with sq != sk, every tile
// configuration (including the benchmark candidates) ---------------------------

struct KernelCase {
  int config;  // a row of sm80::kPrefillTileConfigs, or of sm90::kHopperPrefillConfigs when hopper
  DType dtype;
  bool causal;
  std::vector<int32_t> cu_q, cu_k;
  int heads;
  bool hopper = false;
  sm90::HopperPrefillSchedule schedule = sm90::HopperPrefillSchedule::automatic;  // hopper only
  int repeat = 1;  // launches, the output poisoned before each; the last one is checked
  int max_ctas = 0;  // hopper: the grid cap (0: one CTA per SM)
  // hopper: more launches on the same data, each with its own walk and grid
  // cap, the output poisoned before each and checked after it.
  std::vector<std::pair<sm90::HopperPrefillSchedule, int>> variants = {};
  bool trace = false;  // hopper: the last launch records its diagnostic trace, checked by check_trace
};

// The dims and name of a KernelCase's configuration.
struct KernelConfigView {
  int head_dim_qk, head_dim_v;
  const char* name;
};
KernelConfigView config_of(const KernelCase& c) {
  if (c.hopper) {
    const sm90::HopperPrefillConfig& h = sm90::kHopperPrefillConfigs[c.config];
    return {h.head_dim_qk, h.head_dim_v, h.name};
  }
  const sm80::PrefillTileConfig& t = sm80::kPrefillTileConfigs[c.config];
  return {t.head_dim_qk, t.head_dim_v, t.name};
}

// The diagnostic trace of a hopper launch (PrefillSchedule::trace, layout in
// prefill_schedule.h): the CTAs that ran wrote sane times, clocks and SMs,
// their tiles in time order inside their lives, and every tile of the
// problem is named exactly once over all CTAs.
constexpr int kTraceCtas = 1024;  // more CTAs than any sm90 GPU has SMs
void check_trace(const OwnedTensor& trace_dev, const KernelCase& c) {
  const OwnedTensor host = OwnedTensor::empty(trace_dev.tensor().shape(), DType::i64);
  copy_tensor(trace_dev.tensor(), host.tensor());
  const auto* w = host.data_as<int64_t>();
  constexpr int kWords = sm90::kPrefillTraceWords, kHeader = sm90::kPrefillTraceHeader;
  const int batch = int(c.cu_q.size()) - 1;
  std::vector<std::vector<std::vector<int>>> seen(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    seen[size_t(b)].assign(size_t(c.heads), std::vector<int>(size_t((c.cu_q[b + 1] - c.cu_q[b] + 127) / 128), 0));
  }
  int grid = 0;
  while (grid < kTraceCtas && w[int64_t(grid) * kWords + 1] != 0) ++grid;
  ASSERT_GT(grid, 0);
  if (c.max_ctas > 0) {
    EXPECT_LE(grid, c.max_ctas);
  }
  for (int cta = grid; cta < kTraceCtas; ++cta) ASSERT_EQ(w[int64_t(cta) * kWords + 1], 0) << "CTA " << cta;
  for (int cta = 0; cta < grid; ++cta) {
    const int64_t* h = w + int64_t(cta) * kWords;
    SCOPED_TRACE("CTA " + std::to_string(cta));
    EXPECT_LT(h[0], 1024);                      // %smid
    EXPECT_GE(h[3], h[1]);                      // end time >= start time (ns)
    EXPECT_GT(h[4], h[2]);                      // clock64 advanced
    ASSERT_LE(h[5], sm90::kPrefillTraceTiles);  // the test problems are small
    int64_t prev = h[1];
    for (int i = 0; i < h[5]; ++i) {
      const int64_t* t = h + kHeader + 3 * i;
      EXPECT_GE(t[0], prev);
      EXPECT_LE(t[0], h[3]);
      prev = t[0];
      const int b = int(t[2] >> 40), head = int((t[2] >> 20) & 0xfffff), m = int(t[2] & 0xfffff);
      ASSERT_TRUE(b >= 0 && b < batch && head >= 0 && head < c.heads && m >= 0 &&
                  m < int(seen[size_t(b)][size_t(head)].size()))
          << b << " " << head << " " << m;
      ++seen[size_t(b)][size_t(head)][size_t(m)];
    }
  }
  for (int b = 0; b < batch; ++b)
    for (int head = 0; head < c.heads; ++head)
      for (size_t m = 0; m < seen[size_t(b)][size_t(head)].size(); ++m) {
        EXPECT_EQ(seen[size_t(b)][size_t(head)][m], 1) << "tile " << b << " " << head << " " << m;
      }
}

void run_kernel_case(const KernelCase& c, uint64_t seed) {
  const KernelConfigView cfg = config_of(c);
  std::mt19937_64 rng(seed);
  const int64_t tq = c.cu_q.back(), tk = c.cu_k.back();
  const float scale = 1.f / std::sqrt(float(cfg.head_dim_qk));
  const OwnedTensor q_h = random_host({tq, c.heads, cfg.head_dim_qk}, c.dtype, rng, 1.5f);
  const OwnedTensor k_h = random_host({std::max<int64_t>(tk, 1), c.heads, cfg.head_dim_qk}, c.dtype, rng, 1.5f);
  const OwnedTensor v_h = random_host({std::max<int64_t>(tk, 1), c.heads, cfg.head_dim_v}, c.dtype, rng, 1.f);
  const OwnedTensor q = upload(q_h), k = upload(k_h), v = upload(v_h);
  const OwnedTensor out = OwnedTensor::empty({tq, c.heads, cfg.head_dim_v}, c.dtype, Device::cuda(0));
  const OwnedTensor lse = OwnedTensor::empty({c.heads, tq}, DType::f32, Device::cuda(0));
  test::poison(out.tensor());
  test::poison(lse.tensor());
  const OwnedTensor cu_q = upload(host_i32(c.cu_q)), cu_k = upload(host_i32(c.cu_k));

  sm80::PrefillParams p;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.out = out.data();
  p.lse = lse.data_as<float>();
  p.q_row_stride = q.tensor().stride(0);
  p.q_head_stride = q.tensor().stride(1);
  p.k_row_stride = k.tensor().stride(0);
  p.k_head_stride = k.tensor().stride(1);
  p.v_row_stride = v.tensor().stride(0);
  p.v_head_stride = v.tensor().stride(1);
  p.out_row_stride = out.tensor().stride(0);
  p.out_head_stride = out.tensor().stride(1);
  p.lse_head_stride = tq;
  p.cu_seqlens_q = cu_q.data_as<const int32_t>();
  p.cu_seqlens_k = cu_k.data_as<const int32_t>();
  p.batch = int(c.cu_q.size()) - 1;
  p.num_heads = c.heads;
  p.head_dim_qk = cfg.head_dim_qk;
  p.head_dim_v = cfg.head_dim_v;
  for (int b = 0; b < p.batch; ++b) p.max_seqlen_q = std::max(p.max_seqlen_q, c.cu_q[b + 1] - c.cu_q[b]);
  p.scale = scale;
  p.causal = c.causal;
  p.element = c.dtype == DType::bf16 ? sm80::PrefillElement::bf16 : sm80::PrefillElement::f16;
  std::unique_ptr<OwnedTensor> trace;
  sm90::HopperPrefillDiagnostics diag;
  if (c.hopper && c.trace) {
    trace = std::make_unique<OwnedTensor>(
        OwnedTensor::zeros({int64_t(kTraceCtas) * sm90::kPrefillTraceWords}, DType::i64, Device::cuda(0)));
  }
  for (int i = 0; i < c.repeat; ++i) {
    if (i > 0) test::poison(out.tensor());
    if (c.hopper) {
      diag.trace =
          trace != nullptr && i + 1 == c.repeat ? reinterpret_cast<unsigned long long*>(trace->data()) : nullptr;
      sm90::run_hopper_prefill_attention(p, tq, std::max<int64_t>(tk, 1), nullptr, c.config, c.schedule, c.max_ctas,
                                         &diag);
    } else {
      sm80::run_prefill_attention(p, nullptr, c.config);
    }
  }

  const OwnedTensor ref_out = OwnedTensor::empty({tq, c.heads, cfg.head_dim_v}, DType::f32);
  const OwnedTensor ref_lse = OwnedTensor::empty({c.heads, tq}, DType::f32);
  reference_attention(q_h, k_h, v_h, {c.heads, cfg.head_dim_qk, cfg.head_dim_v, scale, c.causal, c.cu_q, c.cu_k},
                      ref_out, ref_lse);
  const std::string what = std::string(cfg.name) + (c.causal ? " causal" : " non-causal") + " " + dtype_name(c.dtype);
  expect_matches(out, lse, ref_out, ref_lse, c.dtype, what);
  if (trace != nullptr) check_trace(*trace, c);
  for (const auto& [schedule, max_ctas] : c.variants) {
    test::poison(out.tensor());
    test::poison(lse.tensor());
    sm90::run_hopper_prefill_attention(p, tq, std::max<int64_t>(tk, 1), nullptr, c.config, schedule, max_ctas);
    expect_matches(out, lse, ref_out, ref_lse, c.dtype,
                   what + " walk " + std::to_string(int(schedule)) + " max_ctas " + std::to_string(max_ctas));
  }
}

TEST(CudaPrefillKernel, EveryConfigCausalBottomRightAndNonCausal) {
  SKIP_WITHOUT_GPU();
  // Request 0: more keys than queries (the chunked-prefill shape, diagonal
  // shifted right); 1: fewer keys than queries (the first rows see no key);
  // 2: no keys at all; 3: equal lengths crossing several 128-row tiles.
  const std::vector<int32_t> cu_q = {0, 40, 240, 250, 550};
  const std::vector<int32_t> cu_k = {0, 300, 330, 330, 630};
  for (int config = 0; config < sm80::kNumPrefillTileConfigs; ++config) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE(sm80::kPrefillTileConfigs[config].name);
      run_kernel_case({config, DType::bf16, causal, cu_q, cu_k, 3}, 100 + config * 2 + causal);
      if (!sm80::kPrefillTileConfigs[config].candidate) {
        run_kernel_case({config, DType::f16, causal, cu_q, cu_k, 1}, 200 + config * 2 + causal);
      }
    }
  }
}

TEST(CudaPrefillKernel, RefusesUnsupportedDims) {
  sm80::PrefillParams p;
  p.head_dim_qk = 160;
  p.head_dim_v = 128;
  p.scale = 1.f;
  try {
    sm80::run_prefill_attention(p, nullptr);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    // Without CUDA the stub refuses before looking at dims.
    if (msg.find("built without CUDA") == std::string::npos) {
      EXPECT_NE(msg.find("(192, 128)"), std::string::npos) << msg;
    }
  }
}

// ---- the sm_90a kernel directly ------------------------------------------------

TEST(HopperPrefillKernel, CausalBottomRightAndNonCausal) {
  SKIP_WITHOUT_GPU_FOR("hopper");
  // As for the sm80 configurations: more keys than queries, fewer, none,
  // and equal lengths across several 128-row tiles and 128-key blocks.
  const std::vector<int32_t> cu_q = {0, 40, 240, 250, 550};
  const std::vector<int32_t> cu_k = {0, 300, 330, 330, 630};
  for (int config = 0; config < sm90::kNumHopperPrefillConfigs; ++config) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE(sm90::kHopperPrefillConfigs[config].name);
      run_kernel_case({config, DType::bf16, causal, cu_q, cu_k, 3, true}, 300 + config * 2 + causal);
      if (!sm90::kHopperPrefillConfigs[config].candidate) {
        run_kernel_case({config, DType::f16, causal, cu_q, cu_k, 1, true}, 400 + config * 2 + causal);
      }
    }
  }
}

// More tiles than SMs, so every persistent CTA walks several tiles and its
// pipeline phases carry from one tile to the next; requests of 1, 127, 128,
// 129 and 300 rows put tile and block edges everywhere.
TEST(HopperPrefillKernel, ManyTilesPerCta) {
  SKIP_WITHOUT_GPU_FOR("hopper");
  const std::vector<int32_t> cu = {0, 1, 128, 256, 385, 685};
  for (int config = 0; config < sm90::kNumHopperPrefillConfigs; ++config) {
    SCOPED_TRACE(sm90::kHopperPrefillConfigs[config].name);
    run_kernel_case({config, DType::bf16, true, cu, cu, 48, true}, 500);
    run_kernel_case({config, DType::bf16, false, cu, cu, 48, true}, 501);
  }
}

// Varlen orders: the kernel walks requests longest first from a table it
// builds per CTA (up to 256 requests; the lengths below are in no order),
// and in request order past that (300 requests of 0..200 rows, empty ones
// included, so units of short requests are skipped).
TEST(HopperPrefillKernel, LongestFirstAndManyRequests) {
  SKIP_WITHOUT_GPU_FOR("hopper");
  std::vector<int32_t> cu = {0};
  for (int len : {5, 300, 0, 129, 640, 1, 260}) cu.push_back(cu.back() + len);
  run_kernel_case({0, DType::bf16, true, cu, cu, 5, true}, 700);
  run_kernel_case({0, DType::bf16, false, cu, cu, 5, true}, 701);
  std::vector<int32_t> many = {0};
  for (int b = 0; b < 300; ++b) many.push_back(many.back() + (b * 37) % 7 * (b % 11 == 0 ? 29 : 1));
  run_kernel_case({0, DType::bf16, true, many, many, 2, true}, 702);
  run_kernel_case({0, DType::bf16, false, many, many, 2, true}, 703);
}

const char* schedule_name(sm90::HopperPrefillSchedule s) {
  switch (s) {
    case sm90::HopperPrefillSchedule::static_pairs:
      return "pairs";
    case sm90::HopperPrefillSchedule::static_balanced:
      return "static balanced";
    case sm90::HopperPrefillSchedule::dynamic:
      return "dynamic";
    default:
      return "automatic";
  }
}

// Every tile walk explicitly (the cases above take the default): the static
// pairs, the pairs with the balanced tail and the dynamic heaviest-first
// walk, on varlen batches in
// no length order with more tiles than SMs (21 query blocks x 8 heads), the
// request-order fallback past 256 requests, tiles that see no key (handed
// to the consumers with no Q load). After the dynamic launches every tile
// counter is back at 0.
TEST(HopperPrefillKernel, StaticAndDynamicWalks) {
  SKIP_WITHOUT_GPU_FOR("hopper");
  using sm90::HopperPrefillSchedule;
  std::vector<int32_t> varlen = {0};
  for (int len : {5, 300, 0, 129, 640, 1, 260, 700}) varlen.push_back(varlen.back() + len);
  std::vector<int32_t> many = {0};
  for (int b = 0; b < 300; ++b) many.push_back(many.back() + (b * 37) % 7 * (b % 11 == 0 ? 29 : 1));
  int seed = 800;
  for (HopperPrefillSchedule schedule :
       {HopperPrefillSchedule::static_pairs, HopperPrefillSchedule::static_balanced, HopperPrefillSchedule::dynamic}) {
    SCOPED_TRACE(schedule_name(schedule));
    for (bool causal : {true, false}) {
      run_kernel_case({0, DType::bf16, causal, varlen, varlen, 8, true, schedule}, seed++);
      run_kernel_case({0, DType::f16, causal, many, many, 3, true, schedule}, seed++);
      // Fewer keys than queries in one request, more in the other.
      run_kernel_case({0, DType::bf16, causal, {0, 300, 310}, {0, 100, 700}, 5, true, schedule}, seed++);
    }
  }
  EXPECT_TRUE(sm90::hopper_prefill_counters_idle());
}

// The dynamic walk's counter is set back to 0 by each launch: more launches
// in a row than the ring holds counters (1024), the output poisoned before
// each, stay correct, and every counter ends at 0.
TEST(HopperPrefillKernel, DynamicCountersResetAcrossLaunches) {
  SKIP_WITHOUT_GPU_FOR("hopper");
  KernelCase c{
      0, DType::bf16, true, {0, 130, 200, 460}, {0, 130, 260, 520}, 4, true, sm90::HopperPrefillSchedule::dynamic};
  c.repeat = 1100;
  run_kernel_case(c, 900);
  EXPECT_TRUE(sm90::hopper_prefill_counters_idle());
}

// The balanced tail of the static walk needs more units than CTAs and a
// partial round; small grids give both on small problems. Tails that start
// inside a head (p0 > 0) and at its start, whole walks dealt as tail, odd
// query block counts (a middle unit of one tile), tiles that see no key,
// and tails that would reach past the walk's last request (then the plain
// pairs run). Every walk on every grid, so the dynamic one's tail rule
// sees small grids too.
TEST(HopperPrefillKernel, BalancedTailOnSmallGrids) {
  SKIP_WITHOUT_GPU_FOR("hopper");
  using sm90::HopperPrefillSchedule;
  struct Shape {
    std::vector<int32_t> cu_q, cu_k;
    int heads;
  };
  const std::vector<Shape> shapes = {
      {{0, 1000}, {0, 1000}, 3},                        // M 8: 12 units
      {{0, 1100}, {0, 1100}, 2},                        // M 9: 10 units, the middle one a single tile
      {{0, 300, 1200, 1800}, {0, 300, 1200, 1800}, 3},  // walked 900, 600, 300: a tail on grid 2, else too long
      {{0, 300, 900}, {0, 100, 1400}, 2},  // walked 600 (more keys), then 300 (fewer keys): the tail on grid 3
  };
  int seed = 950;
  for (const Shape& sh : shapes) {
    for (bool causal : {true, false}) {
      // One reference per shape; every (walk, grid) launch checked against it.
      KernelCase c{0, DType::bf16, causal, sh.cu_q, sh.cu_k, sh.heads, true, HopperPrefillSchedule::static_balanced};
      for (int grid : {1, 2, 3, 5, 7, 13}) {
        for (HopperPrefillSchedule schedule : {HopperPrefillSchedule::static_balanced,
                                               HopperPrefillSchedule::static_pairs, HopperPrefillSchedule::dynamic}) {
          c.variants.emplace_back(schedule, grid);
        }
      }
      run_kernel_case(c, seed++);
    }
  }
  EXPECT_TRUE(sm90::hopper_prefill_counters_idle());
}

// The static walk with its balanced tail (prefill_schedule.h), on the host,
// for equal requests (the tail then lies in the last one): every tile
// exactly once, the tail heaviest first, and the makespan in key blocks
// (causal: query block m costs m + 1) within one tile of the average and
// never above the plain pairs' when M is even; within 0.2 % of the average
// for the benchmark shapes.
TEST(HopperPrefillSchedule, BalancedTailCoversEveryTileOnceAndBalances) {
  struct Walk {
    int makespan_pairs = 0, makespan = 0;
    double average = 0;
  };
  const auto walk = [](int m_blocks, int heads, int batch, int grid_cap) {
    const int per_head = (m_blocks + 1) / 2, per_request = per_head * heads, units = per_request * batch;
    const int grid = std::min(units, grid_cap);
    std::vector<int> seen(size_t(batch) * heads * m_blocks, 0);
    std::vector<int> load(size_t(grid), 0), load_pairs(size_t(grid), 0);
    const auto cost = [](int m) { return m + 1; };
    int total = 0;
    for (int u = 0; u < units; ++u) {
      for (int half : {0, 1}) {
        int head = -1, m = -1;
        if (sm90::prefill_unit_tile(u % per_request, m_blocks, half, head, m)) {
          load_pairs[size_t(u % grid)] += cost(m);
          total += cost(m);
        }
      }
    }
    int tail_units = sm90::prefill_tail_units(units, grid);
    if (tail_units > per_request) tail_units = 0;  // the kernel's check: the tail inside the last request
    const int front = units - tail_units;
    if (tail_units > 0) {
      EXPECT_EQ(front % grid, 0);  // every CTA runs the same number of units before the tail
    }
    for (int u = 0; u < front; ++u) {
      for (int half : {0, 1}) {
        int head = -1, m = -1;
        if (sm90::prefill_unit_tile(u % per_request, m_blocks, half, head, m)) {
          EXPECT_TRUE(head >= 0 && head < heads && m >= 0 && m < m_blocks);
          ++seen[size_t(((u / per_request) * heads + head) * m_blocks + m)];
          load[size_t(u % grid)] += cost(m);
        }
      }
    }
    if (tail_units > 0) {
      const int first_local = front - (batch - 1) * per_request;
      const int tiles = sm90::prefill_tail_tiles(m_blocks, heads, first_local);
      EXPECT_EQ(tiles, 2 * tail_units - (m_blocks % 2 == 1 ? heads - (first_local / per_head) : 0));
      int prev_m = m_blocks;
      for (int rank = 0; rank < tiles; ++rank) {  // heaviest first over the whole tail
        int head = -1, m = -1;
        sm90::prefill_tail_tile(rank, m_blocks, heads, first_local, head, m);
        EXPECT_LE(m, prev_m) << rank;
        prev_m = m;
      }
      for (int cta = 0; cta < grid; ++cta) {
        for (int round = 0;; ++round) {
          const int rank = sm90::prefill_snake_rank(cta, round, grid);
          if (rank >= tiles) break;
          int head = -1, m = -1;
          sm90::prefill_tail_tile(rank, m_blocks, heads, first_local, head, m);
          EXPECT_TRUE(head >= 0 && head < heads && m >= 0 && m < m_blocks) << rank;
          ++seen[size_t(((batch - 1) * heads + head) * m_blocks + m)];
          load[size_t(cta)] += cost(m);
        }
      }
    }
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "tile " << i;
    Walk w;
    w.makespan_pairs = *std::max_element(load_pairs.begin(), load_pairs.end());
    w.makespan = *std::max_element(load.begin(), load.end());
    w.average = double(total) / grid;
    return w;
  };
  for (int m_blocks : {1, 2, 3, 8, 9, 16, 32, 64}) {
    for (int heads : {1, 3, 16, 128}) {
      for (int batch : {1, 4}) {
        for (int grid : {1, 5, 7, 132}) {
          SCOPED_TRACE("M " + std::to_string(m_blocks) + " H " + std::to_string(heads) + " B " + std::to_string(batch) +
                       " grid " + std::to_string(grid));
          const Walk w = walk(m_blocks, heads, batch, grid);
          if (m_blocks % 2 == 0) {
            // Equal units: every CTA's front costs the same, and the tail
            // evens out the partial round.
            EXPECT_LE(w.makespan, w.makespan_pairs);
            EXPECT_LE(w.makespan, w.average + m_blocks);
          } else {
            // M odd: each head's middle unit is one tile, so the front is
            // already uneven (the pairs' own imbalance) and the tail, dealt
            // as if it were not, may end up to half a unit later.
            EXPECT_LE(w.makespan, w.makespan_pairs + (m_blocks + 1) / 2);
          }
        }
      }
    }
  }
  // The benchmark shapes on an H100's 132 SMs (docs/perf.md): the pairs'
  // partial round costs 1.4-3 %, the balanced tail at most 0.2 %.
  for (auto [m_blocks, heads, batch] :
       {std::tuple{64, 128, 1}, std::tuple{32, 128, 4}, std::tuple{8, 128, 16}, std::tuple{64, 16, 8}}) {
    SCOPED_TRACE("M " + std::to_string(m_blocks) + " H " + std::to_string(heads) + " B " + std::to_string(batch));
    const Walk w = walk(m_blocks, heads, batch, 132);
    EXPECT_GE(w.makespan_pairs, 1.013 * w.average);
    EXPECT_LE(w.makespan, 1.002 * w.average);
  }
}

// Where the default static walk deals its tail: causal launches over about
// as many keys as queries (new tokens), not the context chunks (non-causal)
// nor a causal launch over far more keys than queries.
TEST(HopperPrefillSchedule, BalancedTailByDefaultOnlyWhereItHelps) {
  EXPECT_TRUE(sm90::prefill_balanced_tail_helps(true, 8192, 8192));
  EXPECT_TRUE(sm90::prefill_balanced_tail_helps(true, 2048, 4096));
  EXPECT_FALSE(sm90::prefill_balanced_tail_helps(true, 2048, 4097));
  EXPECT_FALSE(sm90::prefill_balanced_tail_helps(true, 2048, 34816));
  EXPECT_FALSE(sm90::prefill_balanced_tail_helps(false, 2048, 2048));
  EXPECT_FALSE(sm90::prefill_balanced_tail_helps(false, 2048, 32768));
}

// The dynamic walk's order inside one request (prefill_schedule.h), on the
// host: every (head, query block) exactly once, query blocks non-increasing
// inside each section, the last section last and, in the walk's last
// request, large enough that its heaviest tiles leave grid - 1 CTAs about a
// tile each of work after them.
TEST(HopperPrefillSchedule, DynamicOrderCoversEveryTileHeaviestFirst) {
  for (int heads : {1, 2, 3, 5, 16, 40, 128}) {
    for (int m_blocks : {1, 2, 3, 8, 64}) {
      for (int per_section : {1, 2, 3, 7, 1000}) {
        for (bool tail : {false, true}) {
          for (int grid : {1, 7, 132}) {
            const int ps = sm90::prefill_heads_per_section(per_section * 100, 100, heads);
            ASSERT_EQ(ps, std::min(per_section, heads));
            const int last = sm90::prefill_last_section_heads(heads, ps, m_blocks, tail, grid);
            SCOPED_TRACE("H " + std::to_string(heads) + " M " + std::to_string(m_blocks) + " per_section " +
                         std::to_string(ps) + " last " + std::to_string(last) + " grid " + std::to_string(grid));
            ASSERT_GE(last, 1);
            ASSERT_LE(last, heads);
            if (tail && m_blocks > 1) {
              EXPECT_GE(last * (m_blocks - 1), std::min(heads * (m_blocks - 1), 2 * (grid - 1)));
            }
            std::vector<int> seen(size_t(heads * m_blocks), 0);
            int prev_head0 = -1, prev_m = m_blocks;
            for (int local = 0; local < heads * m_blocks; ++local) {
              int head = -1, m = -1;
              sm90::prefill_section_tile(local, m_blocks, heads, ps, last, head, m);
              ASSERT_TRUE(head >= 0 && head < heads && m >= 0 && m < m_blocks) << local;
              ++seen[size_t(head * m_blocks + m)];
              // The section a head belongs to: front sections of ps heads, then the last.
              const int head0 = head >= heads - last ? heads - last : head / ps * ps;
              if (head0 == prev_head0) {
                EXPECT_LE(m, prev_m) << local;
              }
              if (local >= (heads - last) * m_blocks) {
                EXPECT_GE(head, heads - last) << local;
              }
              prev_head0 = head0;
              prev_m = m;
            }
            for (int n : seen) ASSERT_EQ(n, 1);
          }
        }
      }
    }
  }
}

// A small case for compute-sanitizer (scripts/gpu-check.sh runs *Sanitizer*).
TEST(HopperPrefillKernel, SanitizerCase) {
  SKIP_WITHOUT_GPU_FOR("hopper");
  for (int config = 0; config < sm90::kNumHopperPrefillConfigs; ++config) {
    for (sm90::HopperPrefillSchedule schedule :
         {sm90::HopperPrefillSchedule::dynamic, sm90::HopperPrefillSchedule::static_pairs,
          sm90::HopperPrefillSchedule::static_balanced}) {
      run_kernel_case({config, DType::bf16, true, {0, 70, 70, 200}, {0, 90, 95, 225}, 2, true, schedule}, 600);
      run_kernel_case({config, DType::bf16, false, {0, 70, 70, 200}, {0, 90, 95, 225}, 2, true, schedule}, 601);
    }
    // The balanced tail on a grid of 3: 10 units (5 heads x 2 requests of
    // one unit), the last 4 (in the last request) dealt as single tiles.
    KernelCase tail{config,           DType::bf16, true, {0, 70, 70, 200},
                    {0, 90, 95, 225}, 5,           true, sm90::HopperPrefillSchedule::static_balanced};
    tail.max_ctas = 3;
    run_kernel_case(tail, 602);
  }
}

// The diagnostic trace (bench/cuda_prefill_bench.cpp, LATTN_PREFILL_BENCH_TRACE)
// on every walk, on a grid of 5 and a full one: the output stays right and
// the trace names every tile once (check_trace).
TEST(HopperPrefillKernel, TraceRecordsEveryTileOnce) {
  SKIP_WITHOUT_GPU_FOR("hopper");
  using sm90::HopperPrefillSchedule;
  int seed = 1000;
  for (HopperPrefillSchedule schedule :
       {HopperPrefillSchedule::static_pairs, HopperPrefillSchedule::static_balanced, HopperPrefillSchedule::dynamic}) {
    SCOPED_TRACE(schedule_name(schedule));
    for (int max_ctas : {5, 0}) {
      KernelCase c{0, DType::bf16, true, {0, 300, 1000, 1900}, {0, 300, 1000, 1900}, 3, true, schedule};
      c.max_ctas = max_ctas;
      c.repeat = 2;
      c.trace = true;
      run_kernel_case(c, seed++);
    }
  }
}

TEST(HopperPrefillKernel, RefusesUnsupportedDims) {
  sm80::PrefillParams p;
  p.head_dim_qk = 96;
  p.head_dim_v = 64;
  p.scale = 1.f;
  try {
    sm90::run_hopper_prefill_attention(p, 1, 1, nullptr);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    if (msg.find("built without CUDA") == std::string::npos) {
      EXPECT_NE(msg.find("(192, 128)"), std::string::npos) << msg;
    }
  }
}

// ---- the whole forward through the shared backend driver ---------------------

// MlaAttention with `cuda` prefill (and `reference` decode) on the GPU against
// the `reference` backend on the CPU, on every driver case whose dims have a
// cuda kernel. The rest of the CUDA forward path (cuBLAS GEMMs, cache ops,
// merge) belongs to the CUDA ops work; until it is in, the forward refuses
// with NotImplementedError and this test skips, saying so.
TEST_P(CudaPrefill, ForwardAgainstReferenceThroughDriver) {
  SKIP_WITHOUT_GPU_FOR(backend());
  int ran = 0;
  for (const test::BackendCase& c : test::all_forward_cases()) {
    const SelectorConfig config = SelectorConfig::for_dims(c.dims, c.dtype, c.kv_cache_dtype, Device::cuda(0));
    if (c.prefills.empty() || !prefill_class(backend())->validate_configuration(device_capability(0), config).empty()) {
      continue;
    }
    try {
      EXPECT_TRUE(test::check(test::run_backend_case(c, backend(), "reference", Device::cuda(0))));
      ++ran;
    } catch (const NotImplementedError& e) {
      GTEST_SKIP() << "the CUDA forward path is not complete on this branch: " << e.what();
    }
  }
  if (ran == 0) GTEST_SKIP() << "no driver case has dims the " << backend() << " prefill kernels serve";
}

INSTANTIATE_TEST_SUITE_P(Backends, CudaPrefill, ::testing::Values(std::string("cuda"), std::string("hopper")),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- the class: capability, dims table, registration (no GPU needed) ---------

TEST(CudaPrefillClass, ValidateConfiguration) {
  const PrefillBackendClass* cls = cuda_prefill_class();
  if (cls == nullptr) GTEST_SKIP() << "lattn was built without CUDA (no `cuda` prefill backend)";
  const SelectorConfig deepseek =
      SelectorConfig::for_dims(MlaDims::deepseek_v3(), DType::bf16, DType::bf16, Device::cuda(0));
  EXPECT_TRUE(cls->validate_configuration(DeviceCapability{9, 0}, deepseek).empty());
  EXPECT_TRUE(cls->validate_configuration(DeviceCapability{8, 0}, deepseek).empty());
  EXPECT_EQ(cls->validate_configuration(DeviceCapability{7, 5}, deepseek),
            std::vector<std::string>{"compute capability 7.5 not supported"});
  EXPECT_EQ(cls->validate_configuration(std::nullopt, deepseek),
            std::vector<std::string>{"compute capability none (cpu) not supported"});
  const SelectorConfig minicpm = SelectorConfig::for_dims(MlaDims::minicpm3(), DType::f16, DType::f16, Device::cuda(0));
  EXPECT_TRUE(cls->validate_configuration(DeviceCapability{9, 0}, minicpm).empty());

  MlaDims odd = MlaDims::deepseek_v3();
  odd.qk_nope_head_dim = 96;  // qk 160
  const auto reasons = cls->validate_configuration(
      DeviceCapability{9, 0}, SelectorConfig::for_dims(odd, DType::f32, DType::bf16, Device::cuda(0)));
  ASSERT_EQ(reasons.size(), 2u);
  EXPECT_EQ(reasons[0], "dtype torch.float32 not supported");
  EXPECT_EQ(reasons[1],
            "head dims qk_nope_head_dim + qk_rope_head_dim = 160, v_head_dim = 128 not supported by the cuda prefill "
            "kernels (supported (qk, v): " +
                sm80::supported_prefill_head_dims() + ")");
  EXPECT_EQ(sm80::supported_prefill_head_dims(), "(192, 128), (96, 64), (256, 256)");

  PrefillBackendParams p;
  p.num_heads = 4;
  p.scale = 0.1f;
  p.qk_nope_head_dim = 96;
  p.qk_rope_head_dim = 64;
  p.v_head_dim = 128;
  p.context.device = Device::cuda(0);
  EXPECT_THROW(cls->create(p), ValueError);
  p.qk_nope_head_dim = 128;
  p.context.device = Device::cpu();
  EXPECT_THROW(cls->create(p), ValueError);
}

TEST(HopperPrefillClass, ValidateConfiguration) {
  const PrefillBackendClass* cls = prefill_class("hopper");
  if (cls == nullptr) GTEST_SKIP() << "lattn was built without CUDA (no `hopper` prefill backend)";
  if (!cls->is_available()) GTEST_SKIP() << "this build has no sm_90a code";
  const SelectorConfig deepseek =
      SelectorConfig::for_dims(MlaDims::deepseek_v3(), DType::bf16, DType::bf16, Device::cuda(0));
  EXPECT_TRUE(cls->validate_configuration(DeviceCapability{9, 0}, deepseek).empty());
  EXPECT_EQ(cls->validate_configuration(DeviceCapability{8, 0}, deepseek),
            std::vector<std::string>{"compute capability 8.0 not supported"});
  EXPECT_EQ(cls->validate_configuration(DeviceCapability{10, 0}, deepseek),
            std::vector<std::string>{"compute capability 10.0 not supported"});
  // MiniCPM3's 96/64 is served by the sm80 kernels inside the hopper backend.
  const SelectorConfig minicpm = SelectorConfig::for_dims(MlaDims::minicpm3(), DType::f16, DType::f16, Device::cuda(0));
  EXPECT_TRUE(cls->validate_configuration(DeviceCapability{9, 0}, minicpm).empty());
  MlaDims odd = MlaDims::deepseek_v3();
  odd.qk_nope_head_dim = 96;  // qk 160
  const auto reasons = cls->validate_configuration(
      DeviceCapability{9, 0}, SelectorConfig::for_dims(odd, DType::bf16, DType::bf16, Device::cuda(0)));
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("qk_rope_head_dim = 160, v_head_dim = 128 not supported"), std::string::npos) << reasons[0];
}

}  // namespace
}  // namespace lattn
