# The pip route of docs/python.md, offline: a fresh virtual environment on
# the interpreter (with its system packages: Debian's pip, setuptools,
# wheel, numpy), `pip install --no-build-isolation --no-index <repo>`, then
# an import from outside the source and build trees. LATTN_BUILD_DIR makes
# setup.py reuse this build (a from-scratch pip build compiles liblattn again).
#   -DPYTHON=... -DLATTN_SOURCE_DIR=... -DLATTN_BUILD_DIR=... -DWORK_DIR=...
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${PYTHON} -m venv --system-site-packages --without-pip ${WORK_DIR}/venv RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "creating the virtual environment failed (${rc})")
endif()
# An interpreter without pip/setuptools/wheel/numpy among its system packages
# (e.g. a venv's base Python) cannot run this route offline: skip, saying why.
execute_process(COMMAND ${WORK_DIR}/venv/bin/python -c
                        "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ('pip', 'setuptools', 'wheel', 'numpy')))"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc)
  message(STATUS "SKIPPED: the interpreter's system packages lack pip, setuptools, wheel or numpy: ${err}")
  return()
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env LATTN_BUILD_DIR=${LATTN_BUILD_DIR} PIP_NO_CACHE_DIR=1
                        ${WORK_DIR}/venv/bin/python -m pip install --no-build-isolation --no-index -q ${LATTN_SOURCE_DIR}
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "pip install failed (${rc})")
endif()
set(check [=[
import pathlib, sys
import numpy as np
import lattn
here = pathlib.Path(lattn.__file__).resolve()
assert here.is_relative_to(pathlib.Path(sys.prefix).resolve()), f"imported {here}, not the installed copy"
x = np.arange(6, dtype=np.float32)
t = lattn.from_dlpack(x)
assert t.data_ptr == x.ctypes.data and np.from_dlpack(t).ctypes.data == x.ctypes.data
import lattn.vllm
for shipped in ("_lattn.pyi", "py.typed", "vllm_mla.py", "torch_ops.py"):  # type stubs (PEP 561), adapters
    assert (here.parent / shipped).is_file(), f"{shipped} is not installed"
print("pip install ok:", lattn.version(), here.parent)
]=])
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH ${WORK_DIR}/venv/bin/python -c "${check}"
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(rc OR NOT out MATCHES "pip install ok")
  message(FATAL_ERROR "the installed package did not import and run (${rc})")
endif()
