// Picks the kernel table of an instruction-set path (see attention_kernels.h).
#include "cpu/attention_kernels.h"

namespace lattn::cpu {

const KernelTable& kernel_table(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx512_bf16:
      return kernels_avx512_bf16();
    case CpuIsa::avx512:
      return kernels_avx512();
    case CpuIsa::avx2:
      return kernels_avx2();
    case CpuIsa::scalar:
      break;
  }
  return kernels_scalar();
}

}  // namespace lattn::cpu
