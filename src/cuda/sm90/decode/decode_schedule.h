// src/cuda/sm90/decode/decode_schedule.h — which schedule the Hopper 64-row
// wgmma decode kernel runs (plain C++, no CUDA headers: the kernel label and
// the tests ask it too).
#pragma once

namespace lattn::cuda::sm90 {

// The seesaw (seesaw_kernel.cuh) or the serial schedule (decode_kernel.cuh;
// docs/hopper.md). Plans that fold batch-invariant splits (`fold_splits`)
// take the serial kernel, which has the fold; otherwise the default, unless
// LATTN_HOPPER_DECODE=serial|seesaw picks one (read once per process; another
// value is a ValueError).
bool decode_sm90_seesaw(bool fold_splits);

}  // namespace lattn::cuda::sm90
