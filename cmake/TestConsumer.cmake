# Installs the build tree into a scratch prefix, then configures, builds and
# runs examples/consumer against it with find_package(lattn CONFIG REQUIRED).
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${LATTN_BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${LATTN_SOURCE_DIR}/examples/consumer -B ${WORK_DIR}/build
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed (${rc})")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "consumer output: ${out}")
if(rc)
  message(FATAL_ERROR "the consumer failed (${rc})")
endif()
if(NOT out MATCHES "consumer ok")
  message(FATAL_ERROR "the consumer did not print 'consumer ok'")
endif()
