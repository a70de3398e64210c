// Hopper prefill kernel instances for kHopperPrefillConfigs[4] (qk192_v128_m128_n128_s2_pingpong_eager), bf16, causal
// and not.
#include <string_view>

#include "cuda/sm90/prefill/prefill_launch_kernel.cuh"

namespace lattn::cuda::sm90 {
static_assert(std::string_view(kHopperPrefillConfigs[4].name) == "qk192_v128_m128_n128_s2_pingpong_eager",
              "instantiation file out of step with kHopperPrefillConfigs");
template void launch_hopper_prefill_kernel<4, __nv_bfloat16, false>(const sm80::PrefillParams&, const PrefillSchedule&,
                                                                    const CUtensorMap&, const CUtensorMap&,
                                                                    const CUtensorMap&, cudaStream_t);
template void launch_hopper_prefill_kernel<4, __nv_bfloat16, true>(const sm80::PrefillParams&, const PrefillSchedule&,
                                                                   const CUtensorMap&, const CUtensorMap&,
                                                                   const CUtensorMap&, cudaStream_t);
}  // namespace lattn::cuda::sm90
