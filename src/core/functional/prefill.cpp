// Kernel-level varlen prefill (lattn/functional.h): the packed sequences
// become a prefill view, run by the chosen backend's new-token kernel
// (causal) or context-chunk kernel (non-causal, one chunk holding all keys).
#include <cmath>
#include <string>
#include <vector>

#include "lattn/check.h"
#include "lattn/errors.h"
#include "lattn/functional.h"
#include "lattn/selector.h"

namespace lattn {
namespace {

constexpr const char* kOp = "mla_prefill";

OwnedTensor host_copy(const Tensor& t, const char* arg) {
  check_defined(kOp, arg, t);
  check_dtype(kOp, arg, t, DType::i32);
  check_dim(kOp, arg, t, 1);
  check_contiguous(kOp, arg, t);
  OwnedTensor host = OwnedTensor::empty(t.shape(), DType::i32);
  if (t.numel() > 0) copy_tensor(t, host);
  return host;
}

// Checks a cu_seqlens array (starts at 0, non-decreasing, ends at `total`)
// and returns the longest sequence.
int32_t check_cu_seqlens(const OwnedTensor& cu, const char* arg, int64_t total, const char* total_name) {
  const int32_t* c = cu.data_as<int32_t>();
  const int64_t n = cu.tensor().size(0);
  check_arg(n >= 2, kOp, arg, "B + 1 >= 2 entries", cu.tensor().shape_str());
  check_arg(c[0] == 0, kOp, arg, "to start at 0", std::to_string(c[0]));
  int32_t longest = 0;
  for (int64_t b = 0; b + 1 < n; ++b) {
    check_arg(c[b + 1] >= c[b], kOp, arg, "non-decreasing entries",
              std::to_string(c[b]) + " then " + std::to_string(c[b + 1]) + " at " + std::to_string(b));
    longest = std::max(longest, c[b + 1] - c[b]);
  }
  check_arg(c[n - 1] == total, kOp, arg, std::string("to end at ") + total_name + " = " + std::to_string(total),
            std::to_string(c[n - 1]));
  return longest;
}

}  // namespace

std::string mla_prefill(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                        const Tensor& cu_seqlens_k, bool causal, float scale, const Tensor& out, const Tensor& lse,
                        const PrefillCallParams& params) {
  check_arg(std::isfinite(scale) && scale > 0.f, kOp, "scale", "finite and > 0", std::to_string(scale));
  for (auto [t, arg] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}, std::pair{&out, "out"}}) {
    check_defined(kOp, arg, *t);
    check_dim(kOp, arg, *t, 3);
    check_device(kOp, arg, *t, params.device);
  }
  const int64_t Tq = q.size(0), N = q.size(1), Dqk = q.size(2), Tk = k.size(0), V = v.size(2);
  check_shape(kOp, "k", k, {Tk, N, Dqk});
  check_shape(kOp, "v", v, {Tk, N, V});
  check_shape(kOp, "out", out, {Tq, N, V});
  check_dtype(kOp, "k", k, q.dtype());
  check_dtype(kOp, "v", v, q.dtype());
  check_dtype(kOp, "out", out, q.dtype());
  if (lse.defined()) {
    check_shape(kOp, "lse", lse, {N, Tq});
    check_dtype(kOp, "lse", lse, DType::f32);
    check_device(kOp, "lse", lse, params.device);
  }
  const int R = params.qk_rope_head_dim > 0 ? params.qk_rope_head_dim : int(Dqk / 3);
  check_arg(R >= 1 && R < Dqk, kOp, "qk_rope_head_dim", "in [1, " + std::to_string(Dqk) + ")", std::to_string(R));

  // Host copies of the offsets (the plan is made on the host) and the
  // caller's arrays as the device views.
  OwnedTensor cq = host_copy(cu_seqlens_q, "cu_seqlens_q");
  OwnedTensor ck = host_copy(cu_seqlens_k, "cu_seqlens_k");
  check_device(kOp, "cu_seqlens_k", cu_seqlens_k, cu_seqlens_q.device());
  check_arg(cu_seqlens_q.device().is_cpu() || cu_seqlens_q.device() == params.device, kOp, "cu_seqlens_q",
            "on the cpu or on " + device_name(params.device), device_name(cu_seqlens_q.device()));
  const int32_t max_q = check_cu_seqlens(cq, "cu_seqlens_q", Tq, "q.size(0)");
  const int32_t max_k = check_cu_seqlens(ck, "cu_seqlens_k", Tk, "k.size(0)");
  const int64_t B = cq.tensor().size(0) - 1;
  check_shape(kOp, "cu_seqlens_k", cu_seqlens_k, {B + 1});
  for (int64_t b = 0; b + 1 <= B; ++b) {
    const int32_t lq = cq.data_as<int32_t>()[b + 1] - cq.data_as<int32_t>()[b];
    check_arg(lq > 0, kOp, "cu_seqlens_q", "every sequence to have >= 1 query",
              "0 queries for sequence " + std::to_string(b));
    if (causal) {
      const int32_t lk = ck.data_as<int32_t>()[b + 1] - ck.data_as<int32_t>()[b];
      check_arg(lk == lq, kOp, "cu_seqlens_k",
                "== cu_seqlens_q when causal (queries and keys are the same tokens; attend to a cached prefix "
                "with causal=False and merge_attn_states)",
                std::to_string(lk) + " keys for " + std::to_string(lq) + " queries in sequence " + std::to_string(b));
    }
  }

  // Devices the metadata views use: the caller's arrays when they are on
  // the run's device, else device copies.
  OwnedTensor dq, dk;
  Tensor q_loc = cu_seqlens_q, k_loc = cu_seqlens_k;
  if (!(cu_seqlens_q.device() == params.device)) {
    dq = OwnedTensor::empty({B + 1}, DType::i32, params.device);
    dk = OwnedTensor::empty({B + 1}, DType::i32, params.device);
    copy_tensor(cq, dq);
    copy_tensor(ck, dk);
    q_loc = dq;
    k_loc = dk;
  }

  PrefillMetadata md;
  md.num_prefills = int(B);
  md.num_prefill_tokens = int(Tq);
  md.max_query_len = max_q;
  md.max_prefill_seq_len = causal ? max_q : max_k;
  md.query_start_loc_cpu = cq;
  md.query_start_loc = q_loc;
  const int64_t chunk_shape[2] = {1, B + 1};
  OwnedTensor zeros_cpu, zeros_dev;
  if (!causal) {
    // One context chunk holding every key: key rows of sequence b are
    // [cu_seqlens_k[b], cu_seqlens_k[b+1]).
    ContextChunkPlan& c = md.chunks;
    c.num_chunks = 1;
    c.max_context_chunk = max_k;
    c.num_prefills_with_context = int(B);
    c.workspace_size = Tk;
    c.cu_seq_lens_cpu = Tensor(ck.data(), DType::i32, chunk_shape);
    c.cu_seq_lens = Tensor(k_loc.data(), DType::i32, chunk_shape, k_loc.device());
    zeros_cpu = OwnedTensor::zeros({1, B}, DType::i32);
    zeros_dev = OwnedTensor::zeros({1, B}, DType::i32, params.device);
    c.starts_cpu = zeros_cpu;
    c.starts = zeros_dev;
    c.seq_tot = {int32_t(Tk)};
    c.max_seq_lens = {max_k};
  }

  SelectorConfig selector;
  selector.dtype = q.dtype();
  selector.device = params.device;
  selector.mla_dimensions = MLADimensions{int(Dqk) - R, R, int(V)};
  selector.is_r1_compatible = is_deepseek_r1_mla_compatible(selector.mla_dimensions);
  selector.num_heads = int(N);
  selector.prefill_backend = params.backend;
  const auto cls = get_mla_prefill_backend(selector);
  PrefillBackendParams p;
  p.num_heads = int(N);
  p.scale = scale;
  p.kv_lora_rank = params.kv_lora_rank;
  p.qk_nope_head_dim = int(Dqk) - R;
  p.qk_rope_head_dim = R;
  p.v_head_dim = int(V);
  p.dtype = q.dtype();
  p.context = RunContext{params.device, params.stream, params.num_threads};
  const std::unique_ptr<PrefillBackend> backend = cls->create(p);
  backend->prepare_metadata(md);
  if (causal) {
    backend->run_prefill_new_tokens(q, k, v, lse.defined(), out, lse);
  } else if (lse.defined()) {
    backend->run_prefill_context_chunk(0, q, k, v, out, lse);
  } else {
    // The chunk kernel always writes an LSE: give it a scratch one.
    const OwnedTensor scratch = OwnedTensor::empty({N, Tq}, DType::f32, params.device);
    backend->run_prefill_context_chunk(0, q, k, v, out, scratch);
  }
  return cls->name();
}

}  // namespace lattn
