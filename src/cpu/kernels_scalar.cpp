// The plain C++ kernel table (f32, 8-lane arrays): the fallback for CPUs
// without AVX2, and the readable baseline the vector paths are tested with.
#include "cpu/attention_kernels_impl.h"
#include "cpu/isa_scalar.h"

namespace lattn::cpu {
namespace {

const KernelTable kScalar = [] {
  KernelTable t = f32_kernel_table<Scalar, 2 * Scalar::W>(CpuIsa::scalar);
  t.pack_value_pairs = Scalar::pack_value_pairs;
  return t;
}();

}  // namespace

const KernelTable& kernels_scalar() { return kScalar; }

}  // namespace lattn::cpu
