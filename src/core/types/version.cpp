// Version and build options (see lattn/version.h).
#include "lattn/version.h"

#include "build_info.h"

namespace lattn {

const char* version() { return LATTN_VERSION_STRING; }
const char* build_options() { return LATTN_BUILD_OPTIONS_STRING; }

}  // namespace lattn
