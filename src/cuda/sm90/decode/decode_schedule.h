// src/cuda/sm90/decode/decode_schedule.h — which schedule the Hopper 64-row
// wgmma decode kernel runs (plain C++, no CUDA headers: the kernel label and
// the tests ask it too).
//
// Defined here, inline: a build without CUDA compiles the tests that ask it
// but none of the sm90 code.
#pragma once

#include <cstdlib>
#include <string>

#include "lattn/errors.h"

namespace lattn::cuda::sm90 {

// The seesaw unless LATTN_HOPPER_DECODE says otherwise.
constexpr bool kSeesawByDefault = true;

// The seesaw (seesaw_kernel.cuh) or the serial schedule (decode_kernel.cuh;
// docs/hopper.md). Plans that fold batch-invariant splits (`fold_splits`)
// take the serial kernel, which has the fold; otherwise the default, unless
// LATTN_HOPPER_DECODE=serial|seesaw picks one (read once per process; another
// value is a ValueError).
inline bool decode_sm90_seesaw(bool fold_splits) {
  static const bool seesaw = [] {
    const char* v = std::getenv("LATTN_HOPPER_DECODE");
    if (v == nullptr || *v == 0) return kSeesawByDefault;
    const std::string s(v);
    if (s != "serial" && s != "seesaw") {
      throw ValueError("LATTN_HOPPER_DECODE: expected serial or seesaw, got '" + s + "'");
    }
    return s == "seesaw";
  }();
  return seesaw && !fold_splits;
}

}  // namespace lattn::cuda::sm90
