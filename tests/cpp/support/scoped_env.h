// tests/cpp/support/scoped_env.h — sets (or, with nullptr, unsets) an
// environment variable for a scope and restores what was there: the library
// reads its switches (LATTN_DECODE_*, the sparse kernel's, index checks) at
// each plan or call, so a test can flip one for a few lines.
#pragma once

#include <cstdlib>
#include <string>

namespace lattn::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    set(value);
  }
  ~ScopedEnv() { set(had_ ? old_.c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void set(const char* value) {
    if (value) {
      setenv(name_.c_str(), value, 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace lattn::test
