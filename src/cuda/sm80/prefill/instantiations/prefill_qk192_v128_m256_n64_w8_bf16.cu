// Prefill kernel instances for kPrefillTileConfigs[3] (qk192_v128_m256_n64_w8), bf16, causal and not.
#include <string_view>

#include "cuda/sm80/prefill/prefill_launch_kernel.cuh"

namespace lattn::cuda::sm80 {
static_assert(std::string_view(kPrefillTileConfigs[3].name) == "qk192_v128_m256_n64_w8",
              "instantiation file out of step with kPrefillTileConfigs");
template void launch_prefill_kernel<3, __nv_bfloat16, false>(const PrefillParams&, cudaStream_t);
template void launch_prefill_kernel<3, __nv_bfloat16, true>(const PrefillParams&, cudaStream_t);
}  // namespace lattn::cuda::sm80
