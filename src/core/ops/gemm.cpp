// GEMM dispatch by device (see core/ops/gemm.h).
#include "core/ops/gemm.h"

#include "core/ops/device_ops.h"

namespace lattn::detail {

void gemm(const GemmProblem& p, const RunContext& ctx) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  device_ops(ctx.device).gemm(p, ctx);
}

}  // namespace lattn::detail
