// The Hopper decode copy probes (diagnostics, wrong results; ring32_traits.h):
// the producer's ring with no math, for the stage-removal timings of
// docs/perf.md. One kernel per (keys per stage, stages, half the boxes).
#include "cuda/common/cuda_check.h"
#include "cuda/sm90/decode/ring32_instance.h"
#include "cuda/sm90/decode/ring32_kernel.cuh"
#include "cuda/sm90/decode/smem_opt_in_launch.cuh"

namespace lattn::cuda::sm90 {

namespace {
template <int kKeys, int kStages, bool kHalf>
void launch_probe(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                  cudaStream_t stream) {
  using K = DecodeCopyProbeTraits<kKeys, kStages, kHalf>;
  detail::launch_decode_kernel<K, mla_decode_sm90_copy_probe_kernel<K>>(p, cache_map, m_tiles, kv_hint, stream);
  LATTN_CUDA_CHECK_LAUNCH("mla_decode_sm90_copy_probe_kernel");
}
}  // namespace

void launch_decode_sm90_copy_probe(const DecodeParams& p, const CUtensorMap& cache_map, int m_tiles, uint64_t kv_hint,
                                   int variant, cudaStream_t stream) {
  switch (variant) {
    case 0: return launch_probe<64, 2, false>(p, cache_map, m_tiles, kv_hint, stream);
    case 1: return launch_probe<64, 3, false>(p, cache_map, m_tiles, kv_hint, stream);
    case 2: return launch_probe<32, 4, false>(p, cache_map, m_tiles, kv_hint, stream);
    case 3: return launch_probe<64, 2, true>(p, cache_map, m_tiles, kv_hint, stream);
    default: return launch_probe<64, 3, true>(p, cache_map, m_tiles, kv_hint, stream);
  }
}

}  // namespace lattn::cuda::sm90
