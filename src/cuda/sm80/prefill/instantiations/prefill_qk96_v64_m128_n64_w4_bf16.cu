// Prefill kernel instances for kPrefillTileConfigs[1] (qk96_v64_m128_n64_w4), bf16, causal and not.
#include <string_view>

#include "cuda/sm80/prefill/prefill_launch_kernel.cuh"

namespace lattn::cuda::sm80 {
static_assert(std::string_view(kPrefillTileConfigs[1].name) == "qk96_v64_m128_n64_w4",
              "instantiation file out of step with kPrefillTileConfigs");
template void launch_prefill_kernel<1, __nv_bfloat16, false>(const PrefillParams&, cudaStream_t);
template void launch_prefill_kernel<1, __nv_bfloat16, true>(const PrefillParams&, cudaStream_t);
}  // namespace lattn::cuda::sm80
