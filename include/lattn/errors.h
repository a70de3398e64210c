// lattn/errors.h — the exception kinds of lattn's public API.
//
// They mirror the Python exception kinds the vLLM seeds raise, so a message
// written by the seeds (docs/vllm.md) keeps both its text and its kind, and the
// Python bindings translate each kind to the matching Python exception.
#pragma once

#include <stdexcept>
#include <string>

namespace lattn {

// Bad argument value, shape, dtype or configuration (Python ValueError).
class ValueError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A feature the seeds declare but this implementation (or backend) does not
// provide (Python NotImplementedError).
class NotImplementedError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// A backend or plug-in cannot be loaded or resolved (Python ImportError).
class ImportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A backend exists but its dependencies are absent (e.g. built without CUDA,
// no GPU). A kind of ImportError, as "required dependencies not available".
class BackendUnavailableError : public ImportError {
 public:
  using ImportError::ImportError;
};

// A seed assertion / invariant violation (Python AssertionError). Always
// checked, never compiled out like assert().
class AssertionError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// A missing attribute (Python AttributeError), e.g. a weight with no
// recognized weight attribute.
class AttributeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A failure while running (CUDA errors, allocation failures) (Python RuntimeError).
class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An allocation that failed (host memory, cudaMalloc) (Python MemoryError):
// a RuntimeError, so code that catches those still catches it.
class OutOfMemoryError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// Throws AssertionError(message) when cond is false. Always on.
inline void lattn_assert(bool cond, const std::string& message) {
  if (!cond) throw AssertionError(message);
}

}  // namespace lattn
