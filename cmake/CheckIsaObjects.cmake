# Fails when an object compiled with ISA flags (*_avx512.cpp, *_avx2.cpp)
# defines a weak symbol: the linker may pick that copy of an inline function
# for baseline code too, which then crashes on a CPU without the ISA
# (docs/cpu.md, "One binary"). Run by ctest:
#   cmake -DNM=<nm> -DOBJECTS=<;-list of liblattn's objects> -P CheckIsaObjects.cmake
set(checked 0)
foreach(object IN LISTS OBJECTS)
  if(NOT object MATCHES "_(avx512|avx2)\\.cpp\\.o(bj)?$")
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  execute_process(COMMAND ${NM} -C ${object} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm failed on ${object}")
  endif()
  string(REPLACE "\n" ";" lines "${symbols}")
  foreach(line IN LISTS lines)
    # W/V: weak symbols; DW.ref.__gxx_personality_v0 is exception-table data, not code.
    if(line MATCHES " [WV] " AND NOT line MATCHES "DW\\.ref\\.")
      message(FATAL_ERROR "${object} defines a weak symbol (inline code compiled with ISA flags): ${line}")
    endif()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no *_avx512 / *_avx2 object among: ${OBJECTS}")
endif()
message(STATUS "${checked} ISA-flagged objects define no weak symbols")
