// Benchmark cases and their work by docs/bench-method.md (see bench_case.h).
#include "harness/bench_case.h"

#include "lattn/errors.h"

namespace lattn::bench {

const char* phase_name(Phase phase) { return phase == Phase::prefill ? "prefill" : "decode"; }

Phase parse_phase(const std::string& name) {
  if (name == "prefill") return Phase::prefill;
  if (name == "decode") return Phase::decode;
  throw ValueError("unknown benchmark phase '" + name + "' (expected prefill or decode)");
}

std::string BenchCase::name() const {
  std::string s = std::string(phase_name(phase)) + " H" + std::to_string(dims.num_heads) + " B" + std::to_string(batch);
  if (phase == Phase::prefill) {
    s += " q" + std::to_string(query_len);
    if (context_len > 0) s += " ctx" + std::to_string(context_len) + "/" + std::to_string(context_chunks);
    s += std::string(" ") + dtype_name(dtype);
  } else {
    s += " S" + std::to_string(seq_len) + " sq" + std::to_string(query_len) + " bs" + std::to_string(block_size) + " " +
         dtype_name(dtype) + "/" + dtype_name(kv_cache_dtype);
  }
  return s + " " + backend + (batch_invariant ? " bi" : "");
}

void BenchCase::validate() const {
  dims.validate();
  const auto need = [](bool ok, const std::string& what) {
    if (!ok) throw ValueError("benchmark case: " + what);
  };
  need(batch >= 1, "batch must be >= 1, got " + std::to_string(batch));
  need(query_len >= 1, "query_len must be >= 1, got " + std::to_string(query_len));
  need(num_threads >= 0, "num_threads must be >= 0, got " + std::to_string(num_threads));
  if (phase == Phase::prefill) {
    need(context_len >= 0, "context_len must be >= 0, got " + std::to_string(context_len));
    need(context_len == 0 ? context_chunks == 0 : context_chunks >= 1 && context_chunks <= context_len,
         "context_chunks must be 0 without context and in [1, context_len] with it, got " +
             std::to_string(context_chunks));
  } else {
    need(seq_len >= query_len, "seq_len must be >= query_len, got " + std::to_string(seq_len));
    need(block_size >= 1, "block_size must be >= 1, got " + std::to_string(block_size));
  }
}

Work work_of(const BenchCase& c) {
  const double h = c.dims.num_heads, b = c.batch, sq = c.query_len;
  Work w;
  if (c.phase == Phase::prefill) {
    const double dqk = c.dims.qk_head_dim(), dv = c.dims.v_head_dim;
    const double causal_pairs = sq * sq - sq * (sq - 1) / 2;  // S_q S_k - S_q (S_q - 1) / 2 with S_k = S_q
    w.flops = 2 * h * (dqk + dv) * b * (causal_pairs + sq * c.context_len);
    const double tokens = b * (sq + c.context_len);
    w.bytes = double(dtype_size(c.dtype)) * (b * sq * h * (dqk + dv) + tokens * h * (dqk + dv));
  } else {
    const double l = c.dims.kv_lora_rank, r = c.dims.qk_rope_head_dim, sk = c.seq_len;
    w.flops = 2 * h * sq * b * sk * (l + r + l);
    w.bytes = b * sk * (l + r) * dtype_size(c.kv_cache_dtype);
  }
  return w;
}

std::vector<BenchCase> cpu_target_cases(const std::string& backend, int num_threads) {
  BenchCase base;
  base.backend = backend;
  base.dims = MlaDims::deepseek_v3(16);
  base.dtype = base.kv_cache_dtype = DType::bf16;
  base.num_threads = num_threads;
  base.label = "target";

  BenchCase causal = base;
  causal.phase = Phase::prefill;
  causal.query_len = 1024;

  BenchCase chunked = causal;
  chunked.context_len = 8192;
  chunked.context_chunks = 4;

  BenchCase decode16 = base;
  decode16.phase = Phase::decode;
  decode16.batch = 8;
  decode16.seq_len = 4096;
  decode16.query_len = 1;
  decode16.block_size = 16;
  BenchCase decode64 = decode16;
  decode64.block_size = 64;
  return {causal, chunked, decode16, decode64};
}

}  // namespace lattn::bench
