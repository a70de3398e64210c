// The NCCL entry points of lattn/communicator.h when lattn was built without
// NCCL (no CUDA, or no NCCL beside the toolkit): each says so and what to do.
#if !defined(LATTN_WITH_NCCL)
#include "lattn/communicator.h"
#include "lattn/errors.h"

namespace lattn {
namespace {
[[noreturn]] void no_nccl(const char* what) {
  throw BackendUnavailableError(std::string(what) +
                                ": lattn was built without NCCL (it needs CUDA and NCCL's nccl.h/libnccl beside the "
                                "CUDA toolkit at configure time); use make_in_process_group for one process, or "
                                "rebuild with NCCL");
}
}  // namespace

bool nccl_available() { return false; }
NcclUniqueIdBytes nccl_unique_id() { no_nccl("nccl_unique_id"); }
std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueIdBytes&, int, int, Device) {
  no_nccl("make_nccl_communicator");
}
std::unique_ptr<Communicator> wrap_nccl_communicator(void*, Device) { no_nccl("wrap_nccl_communicator"); }

}  // namespace lattn
#endif  // !LATTN_WITH_NCCL
