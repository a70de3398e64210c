# Resolves LATTN_CUDA (AUTO/ON/OFF) into LATTN_CUDA_ENABLED and sets the
# CUDA architectures. "90a" becomes -gencode=arch=compute_90a,code=sm_90a
# (Hopper-only instructions: wgmma, setmaxnreg); plain numbers use CMake's
# CUDA_ARCHITECTURES (sm_XX SASS + nothing else).
set(LATTN_CUDA_ENABLED OFF)
if(LATTN_CUDA STREQUAL "OFF")
  return()
endif()
include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER)
  find_program(_lattn_nvcc nvcc PATHS /usr/local/cuda/bin NO_CACHE)
  if(_lattn_nvcc)
    set(CMAKE_CUDA_COMPILER "${_lattn_nvcc}" CACHE FILEPATH "nvcc")
  endif()
endif()
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(LATTN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LATTN_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
  message(STATUS "lattn: nvcc not found, building without CUDA")
  return()
endif()
set(LATTN_CUDA_ENABLED ON)
# Architectures are passed as explicit -gencode flags (see lattn_cuda_target);
# keep CMake from adding its own.
set(CMAKE_CUDA_ARCHITECTURES OFF)
enable_language(CUDA)
# CMake 3.25 does not know that nvcc >= 12 accepts C++20 (our public headers
# use std::span and <=>), so tell it the flag.
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)

set(LATTN_CUDA_GENCODE "")
foreach(arch IN LISTS LATTN_CUDA_ARCHS)
  list(APPEND LATTN_CUDA_GENCODE "-gencode=arch=compute_${arch},code=sm_${arch}")
endforeach()

# Applies lattn's CUDA flags to a target: gencodes, lambdas, line info,
# a spill report (ThunderKittens' --warn-on-spills habit).
function(lattn_cuda_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:${LATTN_CUDA_GENCODE} --expt-relaxed-constexpr -lineinfo -Xptxas=--warn-on-spills>)
endfunction()
