# Warnings are on for all of lattn's own code; a clean build has none, and
# LATTN_WERROR=ON (CI) turns them into errors so it stays that way.
# -Wno-restrict: GCC 12's -Wrestrict fires falsely inside libstdc++ on
# `"text" + std::to_string(x)` at -O2 (GCC bug 105329); it finds nothing in ours.
# Clang (the fuzz build) does not know the option, so it is given to GCC only.
option(LATTN_WERROR "Treat warnings in lattn's own targets as errors" OFF)
function(lattn_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-Wno-restrict>)
  if(LATTN_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
                                             $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror>)
  endif()
endfunction()
