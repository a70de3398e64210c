// Runtime instruction-set detection and the forced path (see lattn/cpu.h).
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "lattn/cpu.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

constexpr CpuIsa kAllIsas[] = {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512, CpuIsa::avx512_bf16};

// GCC's __builtin_cpu_supports also checks that the OS saves the wide
// registers (XGETBV), so "supported" means usable.
bool cpu_can_run(CpuIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::scalar:
      return true;
    case CpuIsa::avx2:
#if defined(__clang__)
      // clang (the fuzz build) knows no "f16c" here; every AVX2 CPU has F16C.
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#endif
    case CpuIsa::avx512:
      return cpu_can_run(CpuIsa::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case CpuIsa::avx512_bf16:
      return cpu_can_run(CpuIsa::avx512) && __builtin_cpu_supports("avx512bf16");
  }
  return false;
}

std::string supported_list() {
  std::string s;
  for (CpuIsa isa : cpu_isas_supported()) s += std::string(s.empty() ? "" : ", ") + cpu_isa_name(isa);
  return s;
}

void require_runnable(CpuIsa isa, const std::string& who) {
  if (!cpu_can_run(isa)) {
    throw ValueError(who + ": this CPU cannot run the " + cpu_isa_name(isa) + " path (supported: " + supported_list() +
                     ")");
  }
}

// -1: automatic; otherwise the forced CpuIsa.
std::atomic<int> g_forced{-1};
std::once_flag g_env_once;
std::optional<CpuIsa> g_env_isa;

void read_env() {
  const char* text = std::getenv("LATTN_CPU_ISA");
  if (text == nullptr || *text == '\0') return;
  const CpuIsa isa = parse_cpu_isa(text);
  require_runnable(isa, std::string("LATTN_CPU_ISA=") + text);
  g_env_isa = isa;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar:
      return "scalar";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512:
      return "avx512";
    case CpuIsa::avx512_bf16:
      return "avx512bf16";
  }
  return "?";
}

CpuIsa parse_cpu_isa(const std::string& name) {
  for (CpuIsa isa : kAllIsas) {
    if (name == cpu_isa_name(isa)) return isa;
  }
  throw ValueError("unknown CPU instruction-set path '" + name +
                   "' (expected one of: scalar, avx2, avx512, avx512bf16)");
}

std::vector<CpuIsa> cpu_isas_supported() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : kAllIsas) {
    if (cpu_can_run(isa)) out.push_back(isa);
  }
  return out;
}

CpuIsa cpu_isa_best() { return cpu_isas_supported().back(); }

CpuIsa cpu_isa() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return CpuIsa(forced);
  std::call_once(g_env_once, read_env);
  return g_env_isa ? *g_env_isa : cpu_isa_best();
}

void set_cpu_isa(std::optional<CpuIsa> isa) {
  if (isa) require_runnable(*isa, "set_cpu_isa");
  g_forced.store(isa ? int(*isa) : -1, std::memory_order_relaxed);
}

}  // namespace lattn
