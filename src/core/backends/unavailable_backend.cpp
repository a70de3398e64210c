// Placeholder classes for standard backends this build does not contain
// (see unavailable_backend.h).
#include "core/backends/unavailable_backend.h"

#include "lattn/device.h"
#include "lattn/errors.h"

namespace lattn::detail {
namespace {

// What the user can do instead, by member name.
std::string remedy(const std::string& name) {
  if (name == "cuda") {
    return built_with_cuda() ? "Select another backend, or leave the choice to the selector."
                             : "Rebuild lattn with CUDA (cmake -DLATTN_CUDA=ON, which needs nvcc), "
                               "or select another backend.";
  }
  if (name == "hopper") return "Select cuda, or leave the choice to the selector.";
  return "Select another backend, or leave the choice to the selector.";
}

std::string unavailable_message(const char* kind, const std::string& name) {
  return std::string("MLA ") + kind + " backend " + name +
         " is not part of this build of lattn (required dependencies not available). " + remedy(name);
}

class UnavailablePrefillClass final : public PrefillBackendClass {
 public:
  explicit UnavailablePrefillClass(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  bool is_available() const override { return false; }
  std::unique_ptr<PrefillBackend> create(const PrefillBackendParams&) const override {
    throw BackendUnavailableError(unavailable_message("prefill", name_));
  }

 private:
  std::string name_;
};

class UnavailableDecodeClass final : public DecodeBackendClass {
 public:
  explicit UnavailableDecodeClass(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  bool is_available() const override { return false; }
  std::unique_ptr<DecodeBackend> create(const DecodeBackendParams&) const override {
    throw BackendUnavailableError(unavailable_message("decode", name_));
  }

 private:
  std::string name_;
};

}  // namespace

std::shared_ptr<const PrefillBackendClass> make_unavailable_prefill_class(const std::string& name) {
  return std::make_shared<UnavailablePrefillClass>(name);
}

std::shared_ptr<const DecodeBackendClass> make_unavailable_decode_class(const std::string& name) {
  return std::make_shared<UnavailableDecodeClass>(name);
}

}  // namespace lattn::detail
