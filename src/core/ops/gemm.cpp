// GEMM dispatch by device (see core/ops/gemm.h).
#include "core/ops/gemm.h"

#include "core/ops/cuda_hooks.h"

namespace lattn::detail {

void gemm(const GemmProblem& p, const RunContext& ctx) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  if (ctx.device.is_cuda()) {
    cuda_hooks::gemm(p, ctx.device.index, ctx.stream);
  } else {
    cpu_gemm(p, ctx);
  }
}

}  // namespace lattn::detail
