// The AVX2 + FMA kernel table (f32 FMA, 8 lanes). Compiled with AVX2 flags only.
#include "cpu/attention_kernels_impl.h"
#include "cpu/isa_avx2.h"

namespace lattn::cpu {
namespace {

void pack_value_pairs(const uint16_t* even, const uint16_t* odd, int64_t n, uint32_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = uint32_t(even[i]) | (odd ? uint32_t(odd[i]) << 16 : 0u);
}

const KernelTable kAvx2 = [] {
  KernelTable t = f32_kernel_table<Avx2, 2 * Avx2::W>(CpuIsa::avx2);
  t.pack_value_pairs = pack_value_pairs;
  return t;
}();

}  // namespace

const KernelTable& kernels_avx2() { return kAvx2; }

}  // namespace lattn::cpu
