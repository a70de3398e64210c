// lattn/cpu.h — the `cpu` backend's instruction-set paths and classes.
//
// The `cpu` backend ships as one portable binary: its kernels exist once per
// instruction set (plain C++, AVX2+FMA, AVX-512, AVX-512 with BF16 dot
// products) and the best one this CPU supports is picked at run time.
// Tests and benchmarks force a path with set_cpu_isa() or with the
// environment variable LATTN_CPU_ISA=scalar|avx2|avx512|avx512bf16 (read
// once, at the first use of the CPU kernels).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lattn/backend.h"

namespace lattn {

// Ordered: each path needs everything the previous one needs.
enum class CpuIsa : uint8_t {
  scalar,       // plain C++ (baseline x86-64)
  avx2,         // AVX2 + FMA + F16C, 8 f32 lanes
  avx512,       // AVX-512 F/BW/VL/DQ, 16 f32 lanes, f32 FMA
  avx512_bf16,  // AVX-512 + AVX512-BF16: bf16 data multiplied with vdpbf16ps
};

// "scalar", "avx2", "avx512", "avx512bf16".
const char* cpu_isa_name(CpuIsa isa);
// Parses the names above. Throws ValueError listing them otherwise.
CpuIsa parse_cpu_isa(const std::string& name);

// Every path this CPU (and OS) can run, in increasing order.
std::vector<CpuIsa> cpu_isas_supported();
// The best path this CPU can run.
CpuIsa cpu_isa_best();

// The path the `cpu` backend uses now: the one forced by set_cpu_isa, else
// the one named by LATTN_CPU_ISA, else cpu_isa_best(). Throws ValueError when
// LATTN_CPU_ISA names an unknown path or one this CPU cannot run.
CpuIsa cpu_isa();
// Forces a path (nullopt: back to LATTN_CPU_ISA / the best). Throws ValueError
// when this CPU cannot run it. Not meant to be called while kernels run.
void set_cpu_isa(std::optional<CpuIsa> isa);

// The `cpu` backend's classes (also registered under the name "cpu").
std::shared_ptr<const PrefillBackendClass> cpu_prefill_backend_class();
std::shared_ptr<const DecodeBackendClass> cpu_decode_backend_class();

}  // namespace lattn
