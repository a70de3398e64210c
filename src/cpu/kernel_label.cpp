// Which kernels run, in words (lattn/kernel_label.h): the CPU ISA path in
// effect and the projection GEMM the same rules pick as detail::cpu_gemm
// (gemm_cpu.cpp), the labels without an instance, and the backends' default.
#include "lattn/kernel_label.h"

#include <cstdlib>

#include "cpu/gemm_paths.h"
#include "lattn/backend.h"
#include "lattn/cpu.h"

namespace lattn {

std::string cpu_kernel_label(DType dtype) {
  const CpuIsa isa = cpu_isa();  // throws for a bad LATTN_CPU_ISA
  const char* env = std::getenv("LATTN_CPU_ISA");
  std::string source;
  if (isa == cpu_isa_best() && (env == nullptr || *env == '\0')) {
    source = "best for this CPU";
  } else if (env != nullptr && *env != '\0' && parse_cpu_isa(env) == isa) {
    source = std::string("LATTN_CPU_ISA=") + env;
  } else {
    source = "forced by set_cpu_isa";
  }
  // detail::cpu_gemm: the bf16 dot-product kernel for bf16 operands on an
  // AVX512-BF16 path unless OpenBLAS is forced; OpenBLAS otherwise.
  const bool bf16_gemm =
      cpu::gemm_path() != cpu::GemmPath::openblas && isa == CpuIsa::avx512_bf16 && dtype == DType::bf16;
  return std::string(cpu_isa_name(isa)) + " kernels (" + source +
         "); projections: " + (bf16_gemm ? "bf16 vdpbf16ps GEMM" : "OpenBLAS sgemm");
}

std::string backend_kernel_label(const std::string& backend, Device device, DType dtype) {
  if (backend == "cpu" && device.is_cpu()) return "cpu: " + cpu_kernel_label(dtype);
  if (backend == "reference") return "reference: plain loops, fp64 accumulation";
  if (backend == "cuda" || backend == "hopper") {
    return backend + ": " + (backend == "hopper" ? "sm90a wgmma or sm80 mma.sync" : "sm80 mma.sync") +
           " kernels; tile configuration and split-KV parts chosen per layer and step (an instance's "
           "kernel_label says which)";
  }
  return backend + ": a plug-in backend (it reports no kernel details)";
}

// The backends' default (lattn/backend.h): the label without an instance.
std::string PrefillBackend::kernel_label() const {
  return backend_kernel_label(name(), params_.context.device, params_.dtype);
}

std::string DecodeBackend::kernel_label() const {
  return backend_kernel_label(name(), params_.context.device, params_.dtype);
}

}  // namespace lattn
