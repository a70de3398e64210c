// python/src/dcp_objects.h — the Python holders of a communicator and of a
// DCP decode plan (docs/dcp.md), shared by dcp.cpp and attention.cpp.
#pragma once

#include <memory>

#include "lattn/communicator.h"
#include "lattn/dcp.h"

namespace lattn::python {

struct PyCommunicator {
  std::shared_ptr<Communicator> comm;
};

struct PyDcpDecodePlan {
  std::shared_ptr<DcpDecodePlan> plan;
};

}  // namespace lattn::python
