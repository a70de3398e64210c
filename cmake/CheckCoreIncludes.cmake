# ctest core_includes_no_backend_header: src/core/ includes only include/ and
# src/core/ (it reaches devices through core/ops/device_ops.h), never a
# backend folder (src/cpu/, src/cuda/). Run with -DSRC=<repo>/src.
file(GLOB_RECURSE _core_files "${SRC}/core/*")
set(_bad "")
foreach(f IN LISTS _core_files)
  file(STRINGS "${f}" _lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"(cpu|cuda)/")
  foreach(l IN LISTS _lines)
    list(APPEND _bad "${f}: ${l}")
  endforeach()
endforeach()
if(_bad)
  list(JOIN _bad "\n" _text)
  message(FATAL_ERROR "src/core includes a backend header (use core/ops/device_ops.h):\n${_text}")
endif()
message(STATUS "src/core includes no backend header")
