// The sm80 prefill entry point for builds without CUDA: it refuses with one
// sentence, so tests and benchmarks that reach for it link everywhere and
// skip cleanly (they check for a device first).
#ifndef LATTN_WITH_CUDA

#include "cuda/sm80/prefill/prefill_launch.h"
#include "lattn/errors.h"

namespace lattn::cuda::sm80 {

void run_prefill_attention(const PrefillParams&, Stream, int) {
  throw ValueError("prefill attention: lattn was built without CUDA");
}

}  // namespace lattn::cuda::sm80

#endif  // LATTN_WITH_CUDA
