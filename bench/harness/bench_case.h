// bench/harness/bench_case.h — what one benchmark case runs, and how much
// work it is by the formulas of docs/bench-method.md (public API only).
#pragma once

#include <string>
#include <vector>

#include "lattn/config.h"
#include "lattn/device.h"
#include "lattn/dtype.h"

namespace lattn::bench {

enum class Phase { prefill, decode };

const char* phase_name(Phase phase);         // "prefill", "decode"
Phase parse_phase(const std::string& name);  // ValueError otherwise

// One case: a backend (by registry name) on a device, a batch shape, dtypes.
//   prefill: `batch` requests, each with `query_len` new tokens attending
//            causally among themselves, plus `context_len` cached tokens
//            attended non-causally in `context_chunks` chunks of equal size
//            (the last one shorter) whose results are merged by LSE
//            (merge_attn_states, timed with the attention).
//   decode:  `batch` requests, each with `seq_len` tokens in the paged latent
//            cache (its own `query_len` = s_q tokens included), blocks handed
//            out in a shuffled order as a long-running server's would be.
struct BenchCase {
  Phase phase = Phase::decode;
  std::string backend = "cpu";
  MlaDims dims = MlaDims::deepseek_v3(16);
  DType dtype = DType::bf16;           // activations
  DType kv_cache_dtype = DType::bf16;  // decode: the latent cache
  int batch = 1;
  int query_len = 1;
  int context_len = 0;     // prefill only
  int context_chunks = 0;  // prefill only; 0 when context_len == 0
  int seq_len = 0;         // decode only
  int block_size = 16;     // decode only
  Device device = Device::cpu();
  int num_threads = 0;           // CPU backends: 0 = all
  bool batch_invariant = false;  // the backends' batch-invariant mode (RunContext::batch_invariant)
  std::string label;             // free text shown in reports, e.g. "target"

  // "prefill H16 B1 q1024 ctx8192/4 bf16 cpu" / "decode H16 B8 S4096 sq1 bs16 bf16/bf16 cpu"
  std::string name() const;
  // ValueError naming the first field that makes no sense.
  void validate() const;
};

// The work of a case by docs/bench-method.md:
//   prefill FLOPs = 2 H (Dqk + Dv) sum_req (S_q S_k - S_q (S_q - 1) / 2) for the
//                   causal new tokens, + 2 H (Dqk + Dv) S_q S_ctx for the context;
//   decode  FLOPs = 2 H s_q sum_req S_k (L + R + L),
//           bytes = sum_req S_k (L + R) bytes_per_cache_element (the cache read once).
// Prefill bytes (not in docs/bench-method.md; compute bounds it by far): q, k, v and
// out each moved once, in the activation dtype.
struct Work {
  double flops = 0;
  double bytes = 0;
};
Work work_of(const BenchCase& c);

// The cases of the CPU backend's targets (issue 6, docs/bench-method.md), for `backend`:
// bf16, DeepSeek dims with 16 heads: prefill causal 1 x 1024; prefill 1024 new
// + 8192 context in 4 chunks; decode 8 x 4096 with block sizes 16 and 64.
std::vector<BenchCase> cpu_target_cases(const std::string& backend = "cpu", int num_threads = 0);

}  // namespace lattn::bench
