// lattn/version.h — library version and build options.
#pragma once

namespace lattn {

// "0.1.0"
const char* version();
// "cuda=on archs=80;90a openmp=on blas=OpenBLAS" (what this library was built with)
const char* build_options();

}  // namespace lattn
