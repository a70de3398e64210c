// lattn's C++ exception kinds (include/lattn/errors.h) as the Python
// exceptions they mirror, with the same messages:
//   ValueError -> ValueError            NotImplementedError -> NotImplementedError
//   ImportError -> ImportError          BackendUnavailableError -> lattn.BackendUnavailableError (an ImportError)
//   AssertionError -> AssertionError    AttributeError -> AttributeError
//   RuntimeError -> RuntimeError        OutOfMemoryError -> MemoryError
// pybind11's defaults would turn the std::logic_error kinds into RuntimeError.
#include <string>

#include "bind.h"
#include "lattn/errors.h"

namespace lattn::python {

void bind_errors(py::module_& m) {
  // A Python subclass of ImportError: `except ImportError` still catches it.
  static py::exception<BackendUnavailableError> backend_unavailable(m, "BackendUnavailableError", PyExc_ImportError);
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const BackendUnavailableError& e) {
      PyErr_SetString(backend_unavailable.ptr(), e.what());
    } catch (const ImportError& e) {
      PyErr_SetString(PyExc_ImportError, e.what());
    } catch (const ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const NotImplementedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    } catch (const AssertionError& e) {
      PyErr_SetString(PyExc_AssertionError, e.what());
    } catch (const AttributeError& e) {
      PyErr_SetString(PyExc_AttributeError, e.what());
    } catch (const OutOfMemoryError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const RuntimeError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  // Raises the C++ exception of a given kind: lets the tests check every
  // translation, including kinds no cheap real call raises.
  py::module_ testing = m.def_submodule("_testing", "test hooks (not API)");
  testing.def("raise_cpp", [](const std::string& kind, const std::string& message) {
    if (kind == "ValueError") throw ValueError(message);
    if (kind == "NotImplementedError") throw NotImplementedError(message);
    if (kind == "ImportError") throw ImportError(message);
    if (kind == "BackendUnavailableError") throw BackendUnavailableError(message);
    if (kind == "AssertionError") throw AssertionError(message);
    if (kind == "AttributeError") throw AttributeError(message);
    if (kind == "RuntimeError") throw RuntimeError(message);
    if (kind == "OutOfMemoryError") throw OutOfMemoryError(message);
    throw ValueError("raise_cpp: unknown kind '" + kind + "'");
  });
}

}  // namespace lattn::python
