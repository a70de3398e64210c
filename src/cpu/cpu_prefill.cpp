// The `cpu` prefill backend: flash-style attention (online softmax over key
// tiles, never an S x S matrix) for the new tokens (causal) and for each
// context chunk (non-causal), with LSE. Parallel over (request, head, query
// tile) on lattn's thread pool; the math runs in the kernels of the CPU's best
// instruction set (attention_kernels.h). docs/cpu.md explains the design.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/attention_kernels.h"
#include "cpu/cpu_backend_common.h"
#include "cpu/host_workspace.h"
#include "cpu/thread_pool.h"
#include "lattn/check.h"
#include "lattn/cpu.h"
#include "lattn/errors.h"

namespace lattn::cpu {
namespace {

constexpr const char* kNewTokensOp = "cpu prefill run_prefill_new_tokens";
constexpr const char* kChunkOp = "cpu prefill run_prefill_context_chunk";

// One call's attention: for request r, query rows [q_begin[r], q_begin[r+1])
// against key rows [k_begin[r], k_begin[r+1]) of every head.
struct PrefillProblem {
  Tensor q, k, v, out;                    // validated: [Tq, N, P+R], [Tk, N, P+R], [Tk, N, V], [Tq, N, V]
  Tensor lse;                             // [N, Tq] f32, or undefined
  std::vector<int32_t> q_begin, k_begin;  // [num_requests + 1]
  bool causal = false;                    // new tokens: query i of a request sees its keys [0, i]
  DType out_dtype = DType::f32;           // set by validate_tensors: the activation dtype, or fp8_e4m3
  float out_scale = 1.f;                  // fp8_e4m3 output: out = fp8(o / out_scale)
};

struct TileTask {
  int request, head, row0;
};

class CpuPrefillBackend final : public PrefillBackend {
 public:
  explicit CpuPrefillBackend(const PrefillBackendParams& params) : PrefillBackend(params) {}

  std::string name() const override { return "cpu"; }
  bool supports_quant_output(QuantKey key) const override { return key == QuantKey::fp8_e4m3_static_per_tensor; }

  void run_prefill_new_tokens(const Tensor& q, const Tensor& k, const Tensor& v, bool return_softmax_lse,
                              const Tensor& out, const Tensor& lse, const Tensor& output_scale) override {
    const PrefillMetadata& md = require_metadata(kNewTokensOp);
    PrefillProblem pb;
    if (output_scale.defined()) {
      check_device(kNewTokensOp, "output_scale", output_scale, Device::cpu());
      check_dtype(kNewTokensOp, "output_scale", output_scale, DType::f32);
      check_arg(output_scale.numel() == 1, kNewTokensOp, "output_scale", "have one element", output_scale.shape_str());
      pb.out_dtype = DType::fp8_e4m3;
      pb.out_scale = *output_scale.data_as<const float>();
    }
    pb.q_begin = read_offsets(kNewTokensOp, "metadata.query_start_loc_cpu", md.query_start_loc_cpu, md.num_prefills,
                              md.num_prefill_tokens);
    pb.k_begin = pb.q_begin;
    pb.causal = true;
    validate_tensors(kNewTokensOp, q, k, v, out, return_softmax_lse ? lse : Tensor(), md.num_prefill_tokens,
                     md.num_prefill_tokens, pb);
    attend(pb);
  }

  void run_prefill_context_chunk(int chunk_idx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse) override {
    const PrefillMetadata& md = require_metadata(kChunkOp);
    check_arg(chunk_idx >= 0 && chunk_idx < md.chunks.num_chunks, kChunkOp, "chunk_idx",
              "in [0, " + std::to_string(md.chunks.num_chunks) + ")", std::to_string(chunk_idx));
    check_dtype(kChunkOp, "metadata.chunks.cu_seq_lens_cpu", md.chunks.cu_seq_lens_cpu, DType::i32);
    check_shape(kChunkOp, "metadata.chunks.cu_seq_lens_cpu", md.chunks.cu_seq_lens_cpu,
                {md.chunks.num_chunks, int64_t(md.num_prefills) + 1});
    check_dim(kChunkOp, "k", k, 3);
    check_defined(kChunkOp, "lse", lse);
    PrefillProblem pb;
    pb.q_begin = read_offsets(kChunkOp, "metadata.query_start_loc_cpu", md.query_start_loc_cpu, md.num_prefills,
                              md.num_prefill_tokens);
    pb.k_begin = read_offsets(kChunkOp, "metadata.chunks.cu_seq_lens_cpu[chunk_idx]",
                              md.chunks.cu_seq_lens_cpu.select(0, chunk_idx), md.num_prefills, -1);
    check_arg(pb.k_begin.back() <= k.size(0), kChunkOp, "k",
              "have at least cu_seq_lens[chunk_idx][-1] = " + std::to_string(pb.k_begin.back()) + " rows",
              k.shape_str());
    pb.causal = false;
    validate_tensors(kChunkOp, q, k, v, out, lse, md.num_prefill_tokens, k.size(0), pb);
    attend(pb);
  }

 private:
  const PrefillMetadata& require_metadata(const char* op) const {
    if (prefill_metadata_ == nullptr) {
      throw ValueError(std::string(op) + ": prepare_metadata() must be called with the step's prefill metadata first");
    }
    return *prefill_metadata_;
  }

  // Checks every tensor before anything is written.
  void validate_tensors(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, int64_t tq, int64_t tk, PrefillProblem& pb) const {
    const int64_t n = params_.num_heads, dqk = params_.qk_nope_head_dim + params_.qk_rope_head_dim;
    const int64_t dv = params_.v_head_dim;
    const DType dt = params_.dtype;
    if (pb.out_dtype != DType::fp8_e4m3) pb.out_dtype = dt;
    const struct {
      const char* name;
      const Tensor& t;
      int64_t rows, width;
      DType dtype;
    } args[] = {{"q", q, tq, dqk, dt}, {"k", k, tk, dqk, dt}, {"v", v, tk, dv, dt}, {"out", out, tq, dv, pb.out_dtype}};
    for (const auto& a : args) {
      check_device(op, a.name, a.t, Device::cpu());
      check_dtype(op, a.name, a.t, a.dtype);
      check_shape(op, a.name, a.t, {a.rows, n, a.width});
      check_last_dim_contiguous(op, a.name, a.t);
    }
    if (lse.defined()) {
      check_device(op, "lse", lse, Device::cpu());
      check_dtype(op, "lse", lse, DType::f32);
      check_shape(op, "lse", lse, {n, tq});
    }
    pb.q = q;
    pb.k = k;
    pb.v = v;
    pb.out = out;
    pb.lse = lse;
  }

  void attend(const PrefillProblem& pb);

  HostWorkspace packed_;   // keys/values in the kernels' format
  HostWorkspace queries_;  // every tile's queries in the kernels' format
  HostWorkspace scratch_;  // one kernel scratch per thread
};

void CpuPrefillBackend::attend(const PrefillProblem& pb) {
  const KernelTable& kt = kernel_table(cpu_isa());
  const DType dt = params_.dtype;
  const MathPath path = kt.prefill_path(dt);
  const int heads = params_.num_heads;
  const int dqk = params_.qk_nope_head_dim + params_.qk_rope_head_dim, dv = params_.v_head_dim;
  const int requests = int(pb.q_begin.size()) - 1;
  const int threads = thread_count(params_.context);
  const int64_t tk = pb.k_begin.back();
  const size_t esize = size_t(dtype_size(dt));

  // Keys and values in the kernel's format. K: bf16_dot reads the input in
  // place; f32_fma needs f32 rows. V: bf16_dot needs key pairs per request
  // (pairs never straddle two requests); f32_fma needs f32 rows.
  const char* k_base = static_cast<const char*>(pb.k.data());
  const char* v_base = static_cast<const char*>(pb.v.data());
  int64_t k_token_stride = pb.k.stride(0), k_head_stride = pb.k.stride(1);
  int64_t v_token_stride = pb.v.stride(0), v_head_stride = pb.v.stride(1);
  size_t k_elem = esize, v_elem = esize;
  std::vector<int64_t> pair_begin(size_t(requests) + 1, 0);
  for (int r = 0; r < requests; ++r) pair_begin[r + 1] = pair_begin[r] + (pb.k_begin[r + 1] - pb.k_begin[r] + 1) / 2;
  const int64_t total_pairs = pair_begin.back();

  // Where the packed keys and values go (filled in the parallel region below).
  const char* const k_src = k_base;
  const char* const v_src = v_base;
  const int64_t k_src_token = k_token_stride, k_src_head = k_head_stride;
  const int64_t v_src_token = v_token_stride, v_src_head = v_head_stride;
  uint32_t* pairs = nullptr;           // bf16_dot: [N][total_pairs][dv]
  float *kf = nullptr, *vf = nullptr;  // f32_fma from f16/bf16: [Tk][N][dqk], [Tk][N][dv]
  if (path == MathPath::bf16_dot) {
    pairs = static_cast<uint32_t*>(packed_.reserve(size_t(heads) * total_pairs * dv * 4));
    v_base = reinterpret_cast<const char*>(pairs);
    v_head_stride = total_pairs * dv;  // in uint32 elements; v_token_stride unused
    v_elem = 4;
  } else if (dt != DType::f32) {
    kf = static_cast<float*>(packed_.reserve(size_t(tk) * heads * (dqk + dv) * 4));
    vf = kf + size_t(tk) * heads * dqk;
    k_base = reinterpret_cast<const char*>(kf);
    v_base = reinterpret_cast<const char*>(vf);
    k_token_stride = int64_t(heads) * dqk, k_head_stride = dqk;
    v_token_stride = int64_t(heads) * dv, v_head_stride = dv;
    k_elem = v_elem = 4;
  }

  // Tiles in (request, head) order, each head's most expensive (last, for
  // causal) tiles first: consecutive tiles of one thread then share that
  // head's keys and values in its L2, and the cheap tiles that end each head
  // fill the gaps of dynamic scheduling. The largest requests go first.
  const int tile_rows = kt.prefill_tile_rows;
  std::vector<int> order(static_cast<size_t>(requests));
  for (int r = 0; r < requests; ++r) order[size_t(r)] = r;
  const auto work = [&](int r) {
    const int64_t rows = pb.q_begin[r + 1] - pb.q_begin[r], keys = pb.k_begin[r + 1] - pb.k_begin[r];
    return rows * (pb.causal ? rows : keys);
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return work(a) > work(b); });
  std::vector<TileTask> tasks;
  for (int r : order) {
    const int rows = pb.q_begin[r + 1] - pb.q_begin[r];
    for (int h = 0; h < heads; ++h) {
      for (int row0 = (rows - 1) / tile_rows * tile_rows; row0 >= 0; row0 -= tile_rows) tasks.push_back({r, h, row0});
    }
  }

  const size_t scratch_bytes = round_up(kt.prefill_scratch_bytes(dqk, dv), 4096);
  char* scratch = static_cast<char*>(scratch_.reserve(scratch_bytes * size_t(threads)));
  const char* q_base = static_cast<const char*>(pb.q.data());
  char* out_base = static_cast<char*>(pb.out.data());
  const size_t out_esize = size_t(dtype_size(pb.out_dtype));
  float* lse_base = pb.lse.defined() ? pb.lse.data_as<float>() : nullptr;
  const auto job_of = [&](const TileTask& task, int slot) {
    const int r = task.request, h = task.head;
    const int64_t t0 = pb.q_begin[r] + task.row0;
    PrefillTileJob job;
    job.path = path;
    job.q = q_base + (t0 * pb.q.stride(0) + h * pb.q.stride(1)) * esize;
    job.q_stride = pb.q.stride(0);
    job.q_dtype = dt;
    job.rows = std::min(tile_rows, pb.q_begin[r + 1] - pb.q_begin[r] - task.row0);
    job.dqk = dqk;
    job.dv = dv;
    job.k = k_base + (pb.k_begin[r] * k_token_stride + h * k_head_stride) * k_elem;
    job.k_stride = k_token_stride;
    if (path == MathPath::bf16_dot) {
      job.v = v_base + (h * v_head_stride + pair_begin[r] * dv) * v_elem;
      job.v_stride = dv;
    } else {
      job.v = v_base + (pb.k_begin[r] * v_token_stride + h * v_head_stride) * v_elem;
      job.v_stride = v_token_stride;
    }
    job.num_keys = pb.k_begin[r + 1] - pb.k_begin[r];
    job.causal = pb.causal;
    job.first_row = task.row0;
    job.scale = params_.scale;
    job.out = out_base + (t0 * pb.out.stride(0) + h * pb.out.stride(1)) * out_esize;
    job.out_stride = pb.out.stride(0);
    job.out_dtype = pb.out_dtype;
    job.out_scale = pb.out_scale;
    job.lse = lse_base ? lse_base + h * pb.lse.stride(0) + t0 * pb.lse.stride(1) : nullptr;
    job.lse_stride = pb.lse.defined() ? pb.lse.stride(1) : 0;
    job.scratch = scratch + scratch_bytes * size_t(slot);
    return job;
  };

  // Every tile's queries packed first, walking q in memory order (token
  // tiles, then heads): q is strided per (token, head), and packing inside
  // each tile job would take its cache misses one row at a time.
  const int64_t task_count = int64_t(tasks.size());
  std::vector<int64_t> pack_order(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) pack_order[i] = int64_t(i);
  std::stable_sort(pack_order.begin(), pack_order.end(), [&](int64_t a, int64_t b) {
    const TileTask &x = tasks[size_t(a)], &y = tasks[size_t(b)];
    return std::tie(x.request, x.row0, x.head) < std::tie(y.request, y.row0, y.head);
  });
  const size_t query_bytes = round_up(kt.prefill_query_bytes(dqk), 64);
  char* queries = static_cast<char*>(queries_.reserve(query_bytes * tasks.size()));
  // Three passes on lattn's thread pool (keys/values, queries, tiles), each
  // waiting only for the jobs of the one before; the first two in chunks of
  // rows so that a job is worth claiming.
  if (pairs) {
    parallel_jobs(int64_t(requests) * heads, threads, [&](int64_t i, int) {
      const int r = int(i / heads), h = int(i % heads);
      const int64_t len = pb.k_begin[r + 1] - pb.k_begin[r];
      const auto row = [&](int64_t key) {
        return reinterpret_cast<const uint16_t*>(v_src) + (pb.k_begin[r] + key) * v_src_token + h * v_src_head;
      };
      for (int64_t p = 0; 2 * p < len; ++p) {
        kt.pack_value_pairs(row(2 * p), 2 * p + 1 < len ? row(2 * p + 1) : nullptr, dv,
                            pairs + (size_t(h) * total_pairs + pair_begin[r] + p) * dv);
      }
    });
  } else if (kf) {
    constexpr int64_t kTokens = 64;
    parallel_jobs((tk + kTokens - 1) / kTokens, threads, [&](int64_t chunk, int) {
      for (int64_t t = chunk * kTokens; t < std::min(tk, (chunk + 1) * kTokens); ++t) {
        for (int h = 0; h < heads; ++h) {
          kt.to_f32(k_src + (t * k_src_token + h * k_src_head) * esize, dt, dqk, kf + (t * heads + h) * dqk);
          kt.to_f32(v_src + (t * v_src_token + h * v_src_head) * esize, dt, dv, vf + (t * heads + h) * dv);
        }
      }
    });
  }
  constexpr int64_t kPackTasks = 16;
  parallel_jobs((task_count + kPackTasks - 1) / kPackTasks, threads, [&](int64_t chunk, int slot) {
    for (int64_t i = chunk * kPackTasks; i < std::min(task_count, (chunk + 1) * kPackTasks); ++i) {
      const int64_t t = pack_order[size_t(i)];
      kt.pack_prefill_queries(job_of(tasks[size_t(t)], slot), queries + query_bytes * size_t(t));
    }
  });
  parallel_jobs(task_count, threads, [&](int64_t i, int slot) {
    PrefillTileJob job = job_of(tasks[size_t(i)], slot);
    job.q_packed = queries + query_bytes * size_t(i);
    kt.prefill_tile(job);
  });
}

class CpuPrefillBackendClass final : public CpuBackendClass<PrefillBackendClass> {
 public:
  std::unique_ptr<PrefillBackend> create(const PrefillBackendParams& params) const override {
    validate_prefill_params("cpu prefill backend", params, supported_dtypes());
    return std::make_unique<CpuPrefillBackend>(params);
  }
};

const RegisterPrefillBackend kRegisterCpuPrefill{class_object<CpuPrefillBackendClass, PrefillBackendClass>()};

}  // namespace
}  // namespace lattn::cpu

namespace lattn {
std::shared_ptr<const PrefillBackendClass> cpu_prefill_backend_class() {
  return cpu::class_object<cpu::CpuPrefillBackendClass, PrefillBackendClass>();
}
}  // namespace lattn
