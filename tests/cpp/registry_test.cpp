// The backend registries (docs/backends.md): members, paths, overrides, the
// seeds' exact texts, and what standard members missing from a build resolve to.
#include <gtest/gtest.h>

#include "support/error_text.h"

#include <algorithm>

#include "core/backends/builtin_backends.h"
#include "lattn/errors.h"
#include "lattn/registry.h"
#include "support/backend_doubles.h"

namespace lattn {
namespace {

using test::decode_double;
using test::prefill_double;

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override { test::reset_backend_selection_state(); }
  void TearDown() override { test::reset_backend_selection_state(); }
  PrefillBackendRegistry& prefill = mla_prefill_backend_registry();
  DecodeBackendRegistry& decode = mla_decode_backend_registry();
};

// The exception text of fn(), which must throw E.
using test::error_text;

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

const char* kCustomPrefillText =
    "MLA prefill backend CUSTOM must be registered before use. Use "
    "register_mla_prefill_backend(\"CUSTOM\", \"path/to/libyour_backend.so:your_symbol\")";

TEST_F(RegistryTest, TV_REG_UnregisteredCustomRaisesTheSeedText) {
  EXPECT_EQ(error_text<ValueError>([&] { prefill.get_path("CUSTOM"); }), kCustomPrefillText);
  // get_class goes through get_path: the same ValueError.
  EXPECT_EQ(error_text<ValueError>([&] { prefill.get_class("CUSTOM"); }), kCustomPrefillText);
  EXPECT_EQ(error_text<ValueError>([&] { decode.get_path("CUSTOM"); }),
            "MLA decode backend CUSTOM must be registered before use. Use "
            "register_mla_decode_backend(\"CUSTOM\", \"path/to/libyour_backend.so:your_symbol\")");
  EXPECT_FALSE(prefill.is_overridden("CUSTOM"));
}

TEST_F(RegistryTest, TV_REG_DirectRegistrationThenClearOverride) {
  register_mla_prefill_backend("CUSTOM", "my/module/libmy_custom.so:my_custom_plugin");
  EXPECT_EQ(prefill.get_path("CUSTOM"), "my/module/libmy_custom.so:my_custom_plugin");
  EXPECT_TRUE(prefill.is_overridden("CUSTOM"));
  prefill.clear_override("CUSTOM");
  EXPECT_FALSE(prefill.is_overridden("CUSTOM"));
  EXPECT_EQ(error_text<ValueError>([&] { prefill.get_path("CUSTOM"); }), kCustomPrefillText);
  // Clearing again does nothing.
  prefill.clear_override("CUSTOM");
  EXPECT_FALSE(prefill.is_overridden("CUSTOM"));
}

TEST_F(RegistryTest, TV_REG_BuiltInDefaultsAndObjectOverrideOfABuiltIn) {
  for (const char* name : {"reference", "cpu", "cuda", "hopper"}) {
    EXPECT_EQ(prefill.get_path(name), std::string("builtin:") + name);
    EXPECT_EQ(decode.get_path(name), std::string("builtin:") + name);
    EXPECT_FALSE(prefill.is_overridden(name));
  }
  // The decorator form: a class object overrides cuda; its path names the object.
  auto mine = prefill_double({.name = "my_fa"});
  register_mla_prefill_backend("cuda", mine);
  EXPECT_EQ(prefill.get_path("cuda"), "object:my_fa");
  EXPECT_EQ(prefill.get_class("cuda"), mine);
  EXPECT_TRUE(prefill.is_overridden("cuda"));
  // Last registration wins.
  auto newer = prefill_double({.name = "my_fa_v2"});
  register_mla_prefill_backend("cuda", newer);
  EXPECT_EQ(prefill.get_path("cuda"), "object:my_fa_v2");
  EXPECT_EQ(prefill.get_class("cuda"), newer);
  register_mla_prefill_backend("cuda", "libthird.so:third_plugin");
  EXPECT_EQ(prefill.get_path("cuda"), "libthird.so:third_plugin");
  prefill.clear_override("cuda");
  EXPECT_EQ(prefill.get_path("cuda"), "builtin:cuda");
  // The decode registry is separate.
  EXPECT_FALSE(decode.is_overridden("cuda"));
}

TEST_F(RegistryTest, TV_REG_EmptyOverrideMakesGetPathRaise) {
  register_mla_prefill_backend("CUSTOM", "");
  EXPECT_TRUE(prefill.is_overridden("CUSTOM"));
  EXPECT_EQ(error_text<ValueError>([&] { prefill.get_path("CUSTOM"); }), kCustomPrefillText);
  register_mla_prefill_backend("cpu", "");
  EXPECT_EQ(error_text<ValueError>([&] { prefill.get_path("cpu"); }),
            "MLA prefill backend cpu must be registered before use. Use "
            "register_mla_prefill_backend(\"cpu\", \"path/to/libyour_backend.so:your_symbol\")");
}

TEST_F(RegistryTest, MembersAreTheStandardNamesThenOtherBuiltInsThenCustom) {
  for (const auto& names : {prefill.names(), decode.names()}) {
    ASSERT_GE(names.size(), 5u);
    EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 4),
              (std::vector<std::string>{"reference", "cpu", "cuda", "hopper"}));
    EXPECT_EQ(names.back(), "CUSTOM");
  }
}

TEST_F(RegistryTest, EnumLookupOfAnUnknownNameListsTheValidOptions) {
  EXPECT_EQ(error_text<ValueError>([&] { prefill.canonical_name("flash_attn"); }),
            "Unknown MLA prefill backend: 'flash_attn'. Valid options are: " + joined(prefill.names()));
  EXPECT_EQ(error_text<ValueError>([&] { decode.get_path("x"); }),
            "Unknown MLA decode backend: 'x'. Valid options are: " + joined(decode.names()));
  EXPECT_THROW(register_mla_prefill_backend("nope", "a.so:b"), ValueError);
  EXPECT_THROW(prefill.is_overridden(""), ValueError);
}

TEST_F(RegistryTest, NamesMatchCaseInsensitivelyAndReportCanonically) {
  EXPECT_EQ(prefill.canonical_name("custom"), "CUSTOM");
  EXPECT_EQ(prefill.canonical_name("CPU"), "cpu");
  EXPECT_EQ(decode.canonical_name("Hopper"), "hopper");
  register_mla_prefill_backend("Custom", "x/liby.so:z");
  EXPECT_EQ(prefill.get_path("CUSTOM"), "x/liby.so:z");
}

// A standard member this build does not contain is listed and resolves to a
// class that says so; one it contains resolves to the built-in class itself.
TEST_F(RegistryTest, StandardMembersMissingFromTheBuildAreUnavailableNotFaked) {
  const SelectorConfig config;  // bf16 on the CPU: every dtype rule passes
  for (const char* name : {"reference", "cpu", "cuda", "hopper"}) {
    SCOPED_TRACE(name);
    const auto& builtins = detail::builtin_prefill_classes();
    const auto it = std::find_if(builtins.rbegin(), builtins.rend(), [&](const auto& c) { return c->name() == name; });
    const auto cls = prefill.get_class(name);
    EXPECT_EQ(cls, prefill.get_class(name));  // the same object every time
    if (it != builtins.rend()) {
      EXPECT_EQ(cls, *it);
      continue;
    }
    EXPECT_EQ(cls->name(), name);
    EXPECT_FALSE(cls->is_available());
    EXPECT_EQ(cls->validate_configuration(std::nullopt, config),
              std::vector<std::string>{"required dependencies not available"});
    const std::string text = error_text<BackendUnavailableError>([&] { cls->create(PrefillBackendParams{}); });
    EXPECT_EQ(text.rfind(std::string("MLA prefill backend ") + name +
                             " is not part of this build of lattn (required dependencies not available). ",
                         0),
              0u)
        << text;
  }
  for (const char* name : {"reference", "cpu", "cuda", "hopper"}) {
    SCOPED_TRACE(name);
    const auto& builtins = detail::builtin_decode_classes();
    const bool present =
        std::any_of(builtins.begin(), builtins.end(), [&](const auto& c) { return c->name() == name; });
    const auto cls = decode.get_class(name);
    EXPECT_EQ(cls->name(), name);
    if (present) continue;
    EXPECT_FALSE(cls->is_available());
    EXPECT_THROW(cls->create(DecodeBackendParams{}), BackendUnavailableError);
  }
}

// hopper prefill is built in with CUDA (available when the build has sm_90a
// code); without CUDA it, and cuda, are placeholders that explain themselves.
TEST_F(RegistryTest, HopperAndCudaWithoutCudaAreUnavailableToday) {
  const auto& builtins = detail::builtin_prefill_classes();
  const auto registered = [&](const char* n) {
    return std::any_of(builtins.begin(), builtins.end(), [&](const auto& c) { return c->name() == n; });
  };
  EXPECT_EQ(registered("hopper"), built_with_cuda());
  if (!registered("hopper")) {
    EXPECT_FALSE(prefill.get_class("hopper")->is_available());
    EXPECT_THROW(prefill.get_class("hopper")->create({}), BackendUnavailableError);
  }
  if (!built_with_cuda()) {
    ASSERT_FALSE(registered("cuda"));
    EXPECT_FALSE(prefill.get_class("cuda")->is_available());
    const std::string text = error_text<BackendUnavailableError>([&] { prefill.get_class("cuda")->create({}); });
    EXPECT_NE(text.find("Rebuild lattn with CUDA (cmake -DLATTN_CUDA=ON"), std::string::npos) << text;
  }
}

// A class linked into liblattn under a new name becomes a member (before
// CUSTOM) and is what "builtin:NAME" resolves to.
TEST_F(RegistryTest, OtherBuiltInClassesBecomeMembers) {
  auto extra = prefill_double({.name = "test_extra_builtin"});
  // As RegisterPrefillBackend would at load time; undone however the test ends.
  struct TemporaryBuiltin {
    explicit TemporaryBuiltin(std::shared_ptr<const PrefillBackendClass> cls) {
      detail::builtin_prefill_classes().push_back(std::move(cls));
    }
    ~TemporaryBuiltin() { detail::builtin_prefill_classes().pop_back(); }
  } temporary(extra);
  const auto names = prefill.names();
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[names.size() - 2], "test_extra_builtin");
  EXPECT_EQ(prefill.get_path("test_extra_builtin"), "builtin:test_extra_builtin");
  EXPECT_EQ(prefill.get_class("test_extra_builtin"), extra);
  // A built-in may stand in for another member by path.
  register_mla_prefill_backend("cpu", "builtin:test_extra_builtin");
  EXPECT_EQ(prefill.get_class("cpu"), extra);
}

TEST_F(RegistryTest, UnresolvablePathsAreImportErrorsThatSayWhatToChange) {
  register_mla_prefill_backend("CUSTOM", "no_colon_here");
  EXPECT_EQ(error_text<ImportError>([&] { prefill.get_class("CUSTOM"); }),
            "Cannot resolve MLA prefill backend path 'no_colon_here': expected 'path/to/libfoo.so:symbol' (a "
            "plug-in), 'builtin:NAME' or 'object:NAME'. Correct the path given to register_mla_prefill_backend.");
  register_mla_prefill_backend("CUSTOM", "libfoo.so:");
  EXPECT_THROW(prefill.get_class("CUSTOM"), ImportError);

  register_mla_prefill_backend("CUSTOM", "builtin:no_such_backend");
  const std::string builtin_text = error_text<ImportError>([&] { prefill.get_class("CUSTOM"); });
  EXPECT_EQ(builtin_text.rfind("Cannot resolve MLA prefill backend path 'builtin:no_such_backend': this build of "
                               "lattn has no built-in prefill backend class named 'no_such_backend' (built in: ",
                               0),
            0u)
      << builtin_text;

  register_mla_decode_backend("CUSTOM", "object:never_registered");
  EXPECT_EQ(error_text<ImportError>([&] { decode.get_class("CUSTOM"); }),
            "Cannot resolve MLA decode backend path 'object:never_registered': no decode backend class object named "
            "'never_registered' was registered in this process. Pass the class object itself to "
            "register_mla_decode_backend(backend, class_object).");
}

TEST_F(RegistryTest, ObjectRegistrationRefusesNullAndNamelessClasses) {
  EXPECT_EQ(error_text<ValueError>(
                [&] { register_mla_prefill_backend("CUSTOM", std::shared_ptr<const PrefillBackendClass>()); }),
            "register_mla_prefill_backend: argument 'cls' must be a backend class object, got nullptr");
  EXPECT_THROW(register_mla_decode_backend("CUSTOM", decode_double({.name = ""})), ValueError);
  EXPECT_FALSE(prefill.is_overridden("CUSTOM"));
  EXPECT_FALSE(decode.is_overridden("CUSTOM"));
}

TEST_F(RegistryTest, DecodeObjectRegistrationResolves) {
  auto mine = decode_double({.name = "my_decode"});
  register_mla_decode_backend("CUSTOM", mine);
  EXPECT_EQ(decode.get_path("CUSTOM"), "object:my_decode");
  EXPECT_EQ(decode.get_class("custom"), mine);
  EXPECT_FALSE(prefill.is_overridden("CUSTOM"));
}

TEST_F(RegistryTest, GenerationMovesOnEveryChange) {
  const uint64_t g0 = prefill.generation();
  register_mla_prefill_backend("CUSTOM", "a/libb.so:c");
  const uint64_t g1 = prefill.generation();
  EXPECT_GT(g1, g0);
  prefill.clear_override("CUSTOM");
  EXPECT_GT(prefill.generation(), g1);
  const uint64_t g2 = prefill.generation();
  prefill.clear_override("CUSTOM");  // nothing to clear: no change
  EXPECT_EQ(prefill.generation(), g2);
}

TEST(BackendKindTest, Names) {
  EXPECT_STREQ(backend_kind_name(BackendKind::prefill), "prefill");
  EXPECT_STREQ(backend_kind_name(BackendKind::decode), "decode");
  EXPECT_EQ(mla_prefill_backend_registry().kind(), BackendKind::prefill);
  EXPECT_EQ(mla_decode_backend_registry().kind(), BackendKind::decode);
}

}  // namespace
}  // namespace lattn
