// tests/cpp/support/error_text.h — the message of the exception a call throws.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace lattn::test {

// Runs fn, expecting it to throw E; returns e.what() (a test failure and ""
// when it throws nothing).
template <class E, class Fn>
std::string error_text(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

inline bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

}  // namespace lattn::test
