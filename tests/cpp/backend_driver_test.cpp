// Every backend of both registries, through the shared backend test driver
// (support/backend_driver.h), against the `reference` backend on the CPU:
// the test walks mla_prefill_backend_registry() and
// mla_decode_backend_registry(), so a backend registered there gets every
// forward case (mixed batches, hostile data, DeepSeek and other dims, block
// sizes, heads, decode query lengths, fp8 caches, chunked context, padded
// rows, fp8 output, planted NaN/inf) without a test file of its own.
//
// A backend runs where it can: on the CPU when it serves no compute
// capability (supports_compute_capability(nullopt)), else on cuda:0 when the
// machine has a GPU it supports. The other side of the step is `reference`,
// so a failure names one backend. A case the backend declines
// (validate_configuration) is skipped with its reasons; a backend this build
// or machine lacks is skipped saying why. `reference` itself is the oracle
// (checked against a naive fp64 forward in reference_backend_test) and
// CUSTOM is a placeholder; both are left out.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "lattn/backend.h"
#include "lattn/registry.h"
#include "support/backend_driver.h"
#include "support/gpu.h"

namespace lattn::test {
namespace {

struct Member {
  BackendKind kind;
  std::string name;
};

// gtest prints a member by its kind and name.
void PrintTo(const Member& m, std::ostream* os) { *os << backend_kind_name(m.kind) << " " << m.name; }

// Every registry member but the oracle and the placeholder, prefill first.
std::vector<Member> registry_members() {
  std::vector<Member> out;
  for (const std::string& name : mla_prefill_backend_registry().names()) {
    if (name != "reference" && name != kCustomBackendName) out.push_back({BackendKind::prefill, name});
  }
  for (const std::string& name : mla_decode_backend_registry().names()) {
    if (name != "reference" && name != kCustomBackendName) out.push_back({BackendKind::decode, name});
  }
  return out;
}

SelectorConfig config_of(const BackendCase& c, Device device) {
  int max_q = 1;
  for (const auto& d : c.decodes) max_q = std::max(max_q, d.query_len);
  return SelectorConfig::for_dims(c.dims, c.dtype, c.kv_cache_dtype, device, c.block_size, max_q);
}

// Where a member runs (and the capability it is validated against), or why
// it cannot run on this machine.
struct Placement {
  std::optional<Device> device;
  std::optional<DeviceCapability> capability;
  std::string why_not;
};

template <class Class>
Placement place(const Class& cls) {
  if (!cls.is_available()) return {std::nullopt, std::nullopt, "not available in this build"};
  if (cls.supports_compute_capability(std::nullopt)) return {Device::cpu(), std::nullopt, ""};
  const std::string no_gpu = gpu_unavailable_reason();
  if (!no_gpu.empty()) return {std::nullopt, std::nullopt, no_gpu};
  const auto capability = device_capability(0);
  if (!cls.supports_compute_capability(capability)) return {std::nullopt, std::nullopt, "does not run on this GPU"};
  return {Device::cuda(0), capability, ""};
}

std::string joined(const std::vector<std::string>& reasons) {
  std::string s;
  for (const std::string& r : reasons) s += (s.empty() ? "" : "; ") + r;
  return s;
}

using Param = std::tuple<Member, BackendCase>;

class BackendDriver : public ::testing::TestWithParam<Param> {};

TEST_P(BackendDriver, MatchesReference) {
  const Member& member = std::get<0>(GetParam());
  const BackendCase& c = std::get<1>(GetParam());
  const bool prefill = member.kind == BackendKind::prefill;
  if (prefill && c.prefills.empty()) GTEST_SKIP() << "the case has no prefill rows";
  if (!prefill && c.decodes.empty()) GTEST_SKIP() << "the case has no decode rows";

  Placement at;
  std::vector<std::string> reasons;
  if (prefill) {
    const auto cls = mla_prefill_backend_registry().get_class(member.name);
    at = place(*cls);
    if (at.device) reasons = cls->validate_configuration(at.capability, config_of(c, *at.device));
  } else {
    const auto cls = mla_decode_backend_registry().get_class(member.name);
    at = place(*cls);
    if (at.device) reasons = cls->validate_configuration(at.capability, config_of(c, *at.device));
  }
  if (!at.device) GTEST_SKIP() << member.name << ": " << at.why_not;
  if (!reasons.empty()) GTEST_SKIP() << member.name << " declines " << c.name << ": " << joined(reasons);

  const std::string prefill_backend = prefill ? member.name : "reference";
  const std::string decode_backend = prefill ? "reference" : member.name;
  SCOPED_TRACE("prefill backend: " + prefill_backend + ", decode backend: " + decode_backend + " on " +
               device_name(*at.device));
  EXPECT_TRUE(check(run_backend_case(c, prefill_backend, decode_backend, *at.device)));
}

INSTANTIATE_TEST_SUITE_P(Registry, BackendDriver,
                         ::testing::Combine(::testing::ValuesIn(registry_members()),
                                            ::testing::ValuesIn(all_forward_cases())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           const Member& m = std::get<0>(info.param);
                           return std::string(backend_kind_name(m.kind)) + "_" + m.name + "_" +
                                  std::get<1>(info.param).name;
                         });

// The walk is not vacuous: the CPU backends are registered and each serves
// some case on this machine (so the cases above ran, not only skipped).
TEST(BackendDriverWalk, CpuBackendsServeCases) {
  const std::vector<Member> members = registry_members();
  for (const BackendKind kind : {BackendKind::prefill, BackendKind::decode}) {
    const bool listed =
        std::any_of(members.begin(), members.end(), [&](const Member& m) { return m.kind == kind && m.name == "cpu"; });
    EXPECT_TRUE(listed) << "no `cpu` " << backend_kind_name(kind) << " backend in the registry";
  }
  int served = 0;
  const auto cls = mla_decode_backend_registry().get_class("cpu");
  for (const BackendCase& c : all_forward_cases()) {
    if (!c.decodes.empty() && cls->validate_configuration(std::nullopt, config_of(c, Device::cpu())).empty()) ++served;
  }
  EXPECT_GT(served, 0);
}

}  // namespace
}  // namespace lattn::test
