// The `cpu` decode backend: absorbed MLA (MQA over the paged latent cache,
// QK dim L+R, V = the latent, dim L) for every decode token, several query
// tokens per request allowed (causal), any block size, f16/bf16/fp8 caches
// dequantized on the fly. Each request's key range is split when the batch
// alone cannot keep every thread busy; splits are combined by their LSE.
// Threads come from lattn's own pool (thread_pool.h), not OpenMP.
// docs/cpu.md explains the design.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/backends/unchecked_decode_run.h"
#include "cpu/attention_kernels.h"
#include "cpu/cpu_backend_common.h"
#include "cpu/decode_plan.h"
#include "cpu/host_workspace.h"
#include "cpu/thread_pool.h"
#include "lattn/check.h"
#include "lattn/cpu.h"
#include "lattn/errors.h"

namespace lattn::cpu {
namespace {

constexpr const char* kRunOp = "cpu decode run";

class CpuDecodeBackend final : public DecodeBackend, public detail::UncheckedDecodeRun {
 public:
  explicit CpuDecodeBackend(const DecodeBackendParams& params) : DecodeBackend(params) {}

  std::string name() const override { return "cpu"; }

  // The step's plan: made by the first layer that prepares this metadata,
  // shared by every other layer (lattn/step_plans.h).
  void prepare_metadata(const DecodeMetadata& metadata) override {
    DecodeBackend::prepare_metadata(metadata);
    plan_ = shared_plan(metadata);
  }

  void run(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache, const DecodeMetadata& metadata,
           const Tensor& out, const Tensor& lse) override {
    validate(ql_nope, q_pe, cache, metadata, out, lse);
    attend(ql_nope, q_pe, cache, metadata, out, lse);
  }

  // MlaAttention::forward's entry (core/backends/unchecked_decode_run.h):
  // validate_forward checked the step, every block id included, and the
  // layer built ql_nope and out to this backend's shapes. What it leaves to
  // the backend is the block table's layout: rows are read with unit stride.
  void run_unchecked(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache,
                     const DecodeMetadata& metadata, const Tensor& out, const Tensor& lse) override {
    check_last_dim_contiguous(kRunOp, "metadata.block_table_cpu", metadata.block_table_cpu);
    attend(ql_nope, q_pe, cache, metadata, out, lse);
  }

 private:
  void attend(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache, const DecodeMetadata& metadata,
              const Tensor& out, const Tensor& lse) {
    // The plan depends on the lengths and the thread count only: keep it when
    // it was made for exactly these (run() may be handed other metadata than
    // prepare_metadata() saw, or metadata edited in place).
    if (!plan_ || plan_key_ != plan_key() || !plan_matches(*plan_, metadata)) plan_ = shared_plan(metadata);
    if (!plan_matches(*plan_, metadata)) plan_ = std::make_shared<const DecodePlan>(plan_for(metadata));
    execute(ql_nope, q_pe, cache, metadata, out, lse);
  }

  DecodePlan plan_for(const DecodeMetadata& md) const {
    const KernelTable& kt = kernel_table(cpu_isa());
    const std::vector<int32_t> q_begin = read_offsets(kRunOp, "metadata.query_start_loc_cpu", md.query_start_loc_cpu,
                                                      md.num_decodes, md.num_decode_tokens);
    const std::vector<int32_t> seq_lens = read_i32(kRunOp, "metadata.seq_lens_cpu", md.seq_lens_cpu, md.num_decodes);
    return plan_decode(q_begin, seq_lens, params_.num_heads, kt.lanes_per_group, thread_count(params_.context),
                       params_.context.batch_invariant);
  }

  // What a plan depends on besides the metadata's lengths (compared every
  // run; named only for the step's shared plans).
  struct PlanKey {
    int heads = 0, lanes = 0, threads = 0;
    bool fixed_splits = false;
    bool operator==(const PlanKey&) const = default;
    std::string name() const {
      return "cpu decode plan: heads " + std::to_string(heads) + ", lanes " + std::to_string(lanes) + ", threads " +
             std::to_string(threads) + (fixed_splits ? ", fixed splits" : "");
    }
  };
  PlanKey plan_key() const {
    return {params_.num_heads, kernel_table(cpu_isa()).lanes_per_group, thread_count(params_.context),
            params_.context.batch_invariant};
  }

  std::shared_ptr<const DecodePlan> shared_plan(const DecodeMetadata& md) {
    plan_key_ = plan_key();
    if (!md.plans) return std::make_shared<const DecodePlan>(plan_for(md));
    return md.plans->get_or_make<DecodePlan>(plan_key_.name(), [&] { return plan_for(md); });
  }

  // Whether `plan` was made from md's query offsets and sequence lengths.
  static bool plan_matches(const DecodePlan& plan, const DecodeMetadata& md) {
    const int n = md.num_decodes;
    const Tensor& q = md.query_start_loc_cpu;
    const Tensor& s = md.seq_lens_cpu;
    if (plan.seq_lens.size() != size_t(n) || plan.q_begin.size() != size_t(n) + 1) return false;
    for (const Tensor* t : {&q, &s}) {
      if (!t->defined() || !t->device().is_cpu() || t->dtype() != DType::i32 || t->dim() != 1) return false;
    }
    if (q.size(0) < n + 1 || s.size(0) < n) return false;
    const int32_t* qv = q.data_as<const int32_t>();
    const int32_t* sv = s.data_as<const int32_t>();
    for (int r = 0; r <= n; ++r) {
      if (qv[r * q.stride(0)] != plan.q_begin[size_t(r)]) return false;
    }
    for (int r = 0; r < n; ++r) {
      if (sv[r * s.stride(0)] != plan.seq_lens[size_t(r)]) return false;
    }
    return true;
  }

  // Checks every argument (shapes, dtypes, lengths, block ids) before anything is written.
  void validate(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache, const DecodeMetadata& md,
                const Tensor& out, const Tensor& lse) const {
    const int64_t t = md.num_decode_tokens, n = params_.num_heads;
    const int64_t latent = params_.kv_lora_rank, rope = params_.qk_rope_head_dim;
    const struct {
      const char* name;
      const Tensor& t;
      int64_t width;
    } args[] = {{"ql_nope", ql_nope, latent}, {"q_pe", q_pe, rope}, {"out", out, latent}};
    for (const auto& a : args) {
      check_device(kRunOp, a.name, a.t, Device::cpu());
      check_dtype(kRunOp, a.name, a.t, params_.dtype);
      check_shape(kRunOp, a.name, a.t, {t, n, a.width});
      check_last_dim_contiguous(kRunOp, a.name, a.t);
    }
    if (lse.defined()) {
      check_device(kRunOp, "lse", lse, Device::cpu());
      check_dtype(kRunOp, "lse", lse, DType::f32);
      check_shape(kRunOp, "lse", lse, {n, t});
    }
    cache.validate(kRunOp);
    check_device(kRunOp, "cache.data", cache.data, Device::cpu());
    // The messages are built only for a failing check: this runs every step,
    // and formatting them cost microseconds per call (one pair per block).
    if (cache.dtype() != params_.kv_cache_dtype) {
      check_arg(false, kRunOp, "cache",
                std::string("have the backend's kv cache dtype ") + dtype_name(params_.kv_cache_dtype),
                dtype_name(cache.dtype()));
    }
    if (cache.kv_lora_rank != latent || cache.qk_rope_head_dim != rope) {
      check_arg(false, kRunOp, "cache",
                "have latent dims (" + std::to_string(latent) + ", " + std::to_string(rope) + ")",
                "(" + std::to_string(cache.kv_lora_rank) + ", " + std::to_string(cache.qk_rope_head_dim) + ")");
    }
    if (md.block_size != cache.block_size()) {
      check_arg(false, kRunOp, "metadata.block_size",
                "equal the cache's block size " + std::to_string(cache.block_size()), std::to_string(md.block_size));
    }
    const std::vector<int32_t> q_begin =
        read_offsets(kRunOp, "metadata.query_start_loc_cpu", md.query_start_loc_cpu, md.num_decodes, t);
    const std::vector<int32_t> seq_lens = read_i32(kRunOp, "metadata.seq_lens_cpu", md.seq_lens_cpu, md.num_decodes);
    const Tensor& bt = md.block_table_cpu;
    check_device(kRunOp, "metadata.block_table_cpu", bt, Device::cpu());
    check_dtype(kRunOp, "metadata.block_table_cpu", bt, DType::i32);
    check_dim(kRunOp, "metadata.block_table_cpu", bt, 2);
    if (bt.size(0) < md.num_decodes) {
      check_arg(false, kRunOp, "metadata.block_table_cpu",
                "have at least num_decodes = " + std::to_string(md.num_decodes) + " rows", bt.shape_str());
    }
    check_last_dim_contiguous(kRunOp, "metadata.block_table_cpu", bt);
    const int64_t num_blocks = cache.num_blocks();
    for (int r = 0; r < md.num_decodes; ++r) {
      const int32_t s_q = q_begin[r + 1] - q_begin[r], len = seq_lens[r];
      if (s_q > len) {
        check_arg(false, kRunOp, "metadata.seq_lens_cpu",
                  "be >= the request's query length (request " + std::to_string(r) + ": " + std::to_string(s_q) + ")",
                  std::to_string(len));
      }
      const int64_t blocks = (int64_t(len) + md.block_size - 1) / md.block_size;
      if (blocks > bt.size(1)) {
        check_arg(
            false, kRunOp, "metadata.block_table_cpu",
            "have ceil(seq_len / block_size) = " + std::to_string(blocks) + " columns for request " + std::to_string(r),
            bt.shape_str());
      }
      const int32_t* row = bt.data_as<int32_t>() + r * bt.stride(0);
      for (int64_t b = 0; b < blocks; ++b) {
        if (row[b] < 0 || row[b] >= num_blocks) {
          check_arg(false, kRunOp, "metadata.block_table_cpu",
                    "hold block ids in [0, " + std::to_string(num_blocks) + ") for request " + std::to_string(r),
                    "block " + std::to_string(row[b]) + " at column " + std::to_string(b));
        }
      }
    }
  }

  void execute(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache, const DecodeMetadata& md,
               const Tensor& out, const Tensor& lse);

  std::shared_ptr<const DecodePlan> plan_;
  PlanKey plan_key_;
  HostWorkspace partials_;  // per split: o [lanes][L] f32, lse [lanes]
  HostWorkspace scratch_;   // per thread: the kernel's scratch and a combined row
  HostWorkspace pending_;   // per request: splits not finished yet
};

// Combines request r's splits into its output rows by LSE (arXiv:2501.01005 §2.2):
//   o = sum_s e^(lse_s - M) o_s / sum_s e^(lse_s - M),  lse = M + log sum_s e^(lse_s - M),
// the splits taken in key order. `parts` [splits] and `weights` [splits] are scratch.
void combine_request(const DecodePlan& plan, int r, int heads, int latent, const float* partial,
                     const float* partial_lse, const KernelTable& kt, DType dt, char* out_base, const Tensor& out,
                     float* lse_base, const Tensor& lse, const float** parts, float* weights) {
  const size_t esize = size_t(dtype_size(dt));
  const int s0 = plan.split_begin[r], s1 = plan.split_begin[r + 1];
  for (int64_t t = plan.q_begin[r]; t < plan.q_begin[r + 1]; ++t) {
    for (int h = 0; h < heads; ++h) {
      const int lane = int(t - plan.q_begin[r]) * heads + h;
      // A NaN partial LSE (the split attended to a NaN) makes the row NaN.
      float m = -INFINITY;
      for (int s = s0; s < s1; ++s) {
        const float x = partial_lse[plan.splits[s].first_row + lane];
        m = std::isnan(x) || std::isnan(m) ? NAN : std::max(m, x);
      }
      // No part and a scale of NaN (NaN row) or 0 (no key: zeros), else the weighted parts.
      int n = 0;
      float sum = 0.f, scale = std::isnan(m) ? m : 0.f;
      if (m != -INFINITY && !std::isnan(m)) {
        for (int s = s0; s < s1; ++s) {
          const float w = std::exp(partial_lse[plan.splits[s].first_row + lane] - m);
          if (w == 0.f) continue;
          parts[n] = partial + (plan.splits[s].first_row + lane) * size_t(latent);
          weights[n++] = w;
          sum += w;
        }
        scale = 1.f / sum;
      }
      kt.combine_row(parts, weights, n, latent, scale, dt, out_base + (t * out.stride(0) + h * out.stride(1)) * esize);
      if (lse_base) lse_base[h * lse.stride(0) + t * lse.stride(1)] = n == 0 ? m : m + std::log(sum);
    }
  }
}

void CpuDecodeBackend::execute(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache,
                               const DecodeMetadata& md, const Tensor& out, const Tensor& lse) {
  const KernelTable& kt = kernel_table(cpu_isa());
  const DType dt = params_.dtype;
  const MathPath path = kt.decode_path(dt, cache.dtype());
  const int heads = params_.num_heads, latent = params_.kv_lora_rank, rope = params_.qk_rope_head_dim;
  const int threads = thread_count(params_.context);
  const size_t esize = size_t(dtype_size(dt));
  const DecodePlan& plan = *plan_;
  const int requests = int(plan.seq_lens.size());

  float* partial = static_cast<float*>(partials_.reserve((plan.partial_rows * (size_t(latent) + 1)) * 4));
  float* partial_lse = partial + plan.partial_rows * size_t(latent);
  // Per thread: the kernel's scratch, then the combine's part pointers and weights.
  const size_t kernel_bytes = round_up(kt.decode_scratch_bytes(plan.max_lanes, latent, rope), 64);
  const size_t max_splits = size_t(plan.max_splits);
  const size_t scratch_bytes = round_up(kernel_bytes + max_splits * (sizeof(float*) + sizeof(float)), 4096);
  char* scratch = static_cast<char*>(scratch_.reserve(scratch_bytes * size_t(threads)));
  // Splits of each request still running; whoever finishes the last one combines the request.
  auto* pending = static_cast<std::atomic<int>*>(pending_.reserve(sizeof(std::atomic<int>) * size_t(requests)));
  for (int r = 0; r < requests; ++r) {
    new (&pending[r]) std::atomic<int>(plan.split_begin[r + 1] - plan.split_begin[r]);
  }
  const char* qn_base = static_cast<const char*>(ql_nope.data());
  const char* qp_base = static_cast<const char*>(q_pe.data());
  const int32_t* block_table = md.block_table_cpu.data_as<int32_t>();
  const int64_t bt_stride = md.block_table_cpu.stride(0);
  char* out_base = static_cast<char*>(out.data());
  float* lse_base = lse.defined() ? lse.data_as<float>() : nullptr;

  // One call of lattn's thread pool per step, no barrier inside it: jobs are
  // claimed longest first, and a request's splits are combined by the thread
  // that finishes its last split (single-split requests write their rows
  // through the same combine, as one weight of 1).
  parallel_jobs(int64_t(plan.order.size()), threads, [&](int64_t i, int slot) {
    const DecodeSplit& sp = plan.splits[size_t(plan.order[size_t(i)])];
    const int r = sp.request;
    const int64_t t0 = plan.q_begin[r];
    char* my_scratch = scratch + scratch_bytes * size_t(slot);
    DecodeSplitJob job;
    job.path = path;
    job.ql_nope = qn_base + (t0 * ql_nope.stride(0)) * esize;
    job.ql_stride_t = ql_nope.stride(0);
    job.ql_stride_h = ql_nope.stride(1);
    job.q_pe = qp_base + (t0 * q_pe.stride(0)) * esize;
    job.qpe_stride_t = q_pe.stride(0);
    job.qpe_stride_h = q_pe.stride(1);
    job.q_dtype = dt;
    job.s_q = plan.q_begin[r + 1] - plan.q_begin[r];
    job.num_heads = heads;
    job.kv_lora_rank = latent;
    job.rope_dim = rope;
    job.cache = cache.data.data();
    job.cache_dtype = cache.dtype();
    job.block_stride = cache.data.stride(0);
    job.block_size = int(cache.block_size());
    job.cache_scale = cache.is_fp8() ? cache.scale : 1.f;
    job.block_table = block_table + r * bt_stride;
    job.seq_len = plan.seq_lens[r];
    job.key_begin = sp.key_begin;
    job.key_end = sp.key_end;
    job.scale = params_.scale;
    job.o = partial + sp.first_row * size_t(latent);
    job.lse = partial_lse + sp.first_row;
    job.scratch = my_scratch;
    kt.decode_split(job);
    // acq_rel: the combining thread sees every split's partial results.
    if (pending[r].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      const auto** parts = reinterpret_cast<const float**>(my_scratch + kernel_bytes);
      combine_request(plan, r, heads, latent, partial, partial_lse, kt, dt, out_base, out, lse_base, lse, parts,
                      reinterpret_cast<float*>(parts + max_splits));
    }
  });
}

class CpuDecodeBackendClass final : public CpuBackendClass<DecodeBackendClass> {
 public:
  std::unique_ptr<DecodeBackend> create(const DecodeBackendParams& params) const override {
    validate_decode_params("cpu decode backend", params, supported_dtypes(), supported_kv_cache_dtypes());
    return std::make_unique<CpuDecodeBackend>(params);
  }
};

const RegisterDecodeBackend kRegisterCpuDecode{class_object<CpuDecodeBackendClass, DecodeBackendClass>()};

}  // namespace
}  // namespace lattn::cpu

namespace lattn {
std::shared_ptr<const DecodeBackendClass> cpu_decode_backend_class() {
  return cpu::class_object<cpu::CpuDecodeBackendClass, DecodeBackendClass>();
}
}  // namespace lattn
