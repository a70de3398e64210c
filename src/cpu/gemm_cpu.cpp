// detail::cpu_gemm: picks the OpenBLAS or the bf16-dot implementation (see
// gemm_paths.h; the measurements behind the choice are in docs/cpu.md).
#include <atomic>

#include "core/ops/gemm.h"
#include "cpu/cpu_backend_common.h"
#include "cpu/gemm_paths.h"
#include "cpu/host_workspace.h"
#include "cpu/thread_pool.h"
#include "lattn/cpu.h"

namespace lattn {
namespace cpu {
namespace {

std::atomic<GemmPath> g_path{GemmPath::automatic};

}  // namespace

void set_gemm_path(GemmPath path) { g_path.store(path, std::memory_order_relaxed); }
GemmPath gemm_path() { return g_path.load(std::memory_order_relaxed); }

bool bf16_gemm_applies(const detail::GemmProblem& p) {
  return cpu_isa() == CpuIsa::avx512_bf16 && p.a_dtype == DType::bf16 && p.b_dtype == DType::bf16 &&
         (p.c_dtype == DType::f32 || p.c_dtype == DType::bf16 || p.c_dtype == DType::f16);
}

size_t gemm_bf16_workspace_bytes(const detail::GemmProblem& p) {
  const int64_t npad = (p.n + 15) / 16 * 16, pairs = (p.k + 1) / 2;
  return size_t(p.batch * (pairs > 0 ? pairs : 1) * npad) * 4;
}

void gemm_bf16_dot(const detail::GemmProblem& p, int threads, uint32_t* packed) {
  const Bf16GemmPlan plan = gemm_bf16_plan(p);
  if (plan.packed) {
    parallel_jobs(p.batch, threads, [&](int64_t b, int) { gemm_bf16_pack(p, plan, b, packed); });
  }
  parallel_jobs(plan.items, threads, [&](int64_t i, int) { gemm_bf16_item(p, plan, i, packed); });
}

}  // namespace cpu

namespace detail {

void cpu_gemm(const GemmProblem& p, const RunContext& ctx) {
  const int threads = cpu::thread_count(ctx);
  const cpu::GemmPath forced = cpu::gemm_path();
  const bool bf16 = forced != cpu::GemmPath::openblas && cpu::bf16_gemm_applies(p);
  if (bf16) {
    // B's packed panels, kept per calling thread between calls.
    thread_local cpu::HostWorkspace packed;
    cpu::gemm_bf16_dot(p, threads, static_cast<uint32_t*>(packed.reserve(cpu::gemm_bf16_workspace_bytes(p))));
  } else if (ctx.batch_invariant) {
    cpu::gemm_fixed_order(p, threads);
  } else {
    cpu::gemm_openblas(p, threads);
  }
}

}  // namespace detail
}  // namespace lattn
