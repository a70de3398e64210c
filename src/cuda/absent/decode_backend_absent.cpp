// decode_plans_launched (cuda/cuda_decode_backend.h) for builds without CUDA
// (src/cuda/absent/ is compiled only there): no backend is a CUDA one.
#include "cuda/cuda_decode_backend.h"

namespace lattn::cuda {

int64_t decode_plans_launched(const DecodeBackend&) { return -1; }
std::vector<int32_t> decode_plan_num_splits(const DecodeBackend&) { return {}; }
int decode_plan_num_parts(const DecodeBackend&) { return -1; }

}  // namespace lattn::cuda
