// Prefill kernel instances for kPrefillTileConfigs[2] (qk256_v256_m128_n64_w8), f16, causal and not.
#include <string_view>

#include "cuda/sm80/prefill/prefill_launch_kernel.cuh"

namespace lattn::cuda::sm80 {
static_assert(std::string_view(kPrefillTileConfigs[2].name) == "qk256_v256_m128_n64_w8",
              "instantiation file out of step with kPrefillTileConfigs");
template void launch_prefill_kernel<2, __half, false>(const PrefillParams&, cudaStream_t);
template void launch_prefill_kernel<2, __half, true>(const PrefillParams&, cudaStream_t);
}  // namespace lattn::cuda::sm80
