// Decode context parallelism (lattn/dcp.h, lattn/communicator.h): the
// communicators, the shard arithmetic and the rank-local decode plan.
// MlaAttention.set_dcp and forward(plan) are in attention.cpp.
#include <cstring>
#include <string>

#include "bind.h"
#include "convert.h"
#include "dcp_objects.h"
#include "lattn/errors.h"
#include "mla_metadata.h"

namespace lattn::python {

DcpCombineMethod dcp_method_arg(const std::string& name) {
  if (name == "all_gather_reduce_scatter" || name == "ag-rs") return DcpCombineMethod::all_gather_reduce_scatter;
  if (name == "all_to_all" || name == "all-to-all") return DcpCombineMethod::all_to_all;
  throw ValueError("method must be 'all_gather_reduce_scatter' or 'all_to_all', got '" + name + "'");
}

void bind_dcp(py::module_& m) {
  py::class_<PyCommunicator>(m, "Communicator",
                             "One rank's handle on a group (docs/dcp.md): from make_in_process_group or NCCL.")
      .def_property_readonly("rank", [](const PyCommunicator& c) { return c.comm->rank(); })
      .def_property_readonly("world_size", [](const PyCommunicator& c) { return c.comm->world_size(); })
      .def_property_readonly("kind", [](const PyCommunicator& c) { return std::string(c.comm->kind()); })
      .def_property_readonly("device", [](const PyCommunicator& c) { return device_name(c.comm->device()); })
      .def("barrier", [](PyCommunicator& c) {
        py::gil_scoped_release release;
        c.comm->barrier();
      });
  m.def(
      "make_in_process_group",
      [](int world_size, py::handle device) {
        auto comms = make_in_process_group(world_size, device_arg(device));
        py::list out;
        for (auto& c : comms) out.append(PyCommunicator{std::shared_ptr<Communicator>(std::move(c))});
        return out;
      },
      py::arg("world_size"), py::arg("device") = "cpu",
      "world_size communicators of one in-process group (one per thread; each collective waits for every rank).");
  m.def("nccl_available", &nccl_available);
  m.def(
      "nccl_unique_id",
      [] {
        const NcclUniqueIdBytes id = nccl_unique_id();
        return py::bytes(id.data(), id.size());
      },
      "ncclUniqueId's 128 bytes: made on one rank, sent to the others by the caller.");
  m.def(
      "make_nccl_communicator",
      [](py::bytes id, int world_size, int rank, py::handle device) {
        const std::string raw = id;
        if (raw.size() != sizeof(NcclUniqueIdBytes)) {
          throw ValueError("make_nccl_communicator: id must be the 128 bytes of nccl_unique_id(), got " +
                           std::to_string(raw.size()) + " bytes");
        }
        NcclUniqueIdBytes bytes{};
        std::memcpy(bytes.data(), raw.data(), bytes.size());
        const Device dev = device_arg(device);
        py::gil_scoped_release release;  // blocks until every rank joins
        return PyCommunicator{std::shared_ptr<Communicator>(make_nccl_communicator(bytes, world_size, rank, dev))};
      },
      py::arg("id"), py::arg("world_size"), py::arg("rank"), py::arg("device"));
  m.def(
      "wrap_nccl_communicator",
      [](uintptr_t nccl_comm, py::handle device) {
        return PyCommunicator{std::shared_ptr<Communicator>(
            wrap_nccl_communicator(reinterpret_cast<void*>(nccl_comm), device_arg(device)))};
      },
      py::arg("nccl_comm"), py::arg("device"),
      "Wraps an ncclComm_t the engine already has (its address as an int); lattn does not destroy it.");

  py::class_<DcpConfig>(m, "DcpConfig", "A DCP group as one rank sees it (docs/dcp.md).")
      .def(py::init([](int world_size, int rank, int interleave) {
             DcpConfig c{world_size, rank, interleave};
             c.validate();
             return c;
           }),
           py::arg("world_size") = 1, py::arg("rank") = 0, py::arg("interleave") = 1)
      .def_readonly("world_size", &DcpConfig::world_size)
      .def_readonly("rank", &DcpConfig::rank)
      .def_readonly("interleave", &DcpConfig::interleave)
      .def(
          "owner", [](const DcpConfig& c, int64_t pos) { return dcp_owner(c, pos); }, py::arg("pos"),
          "The rank holding global token position pos.")
      .def(
          "local_position", [](const DcpConfig& c, int64_t pos) { return dcp_local_position(c, pos); }, py::arg("pos"))
      .def(
          "local_count", [](const DcpConfig& c, int64_t n) { return dcp_local_count(c, n); }, py::arg("n"),
          "Tokens among positions [0, n) on this rank.");

  py::class_<PyDcpDecodePlan>(m, "DcpDecodePlan",
                              "One rank's part of a step (build_dcp_decode_metadata, build_dcp_metadata).")
      .def_property_readonly("metadata",
                             [](const PyDcpDecodePlan& p) {
                               // Shares the plan's lifetime.
                               return PyMlaMetadata{std::shared_ptr<MlaMetadata>(p.plan, &p.plan->metadata)};
                             })
      .def_property_readonly("empty_rows", [](const PyDcpDecodePlan& p) { return p.plan->empty_rows; })
      .def_property_readonly("prefill_has_context",
                             [](const PyDcpDecodePlan& p) { return p.plan->prefill_has_context; });
  m.def(
      "build_dcp_decode_metadata",
      [](const MlaMetadataBuilder& builder, py::handle requests, const DcpConfig& dcp, py::handle device) {
        const std::vector<RequestSpec> specs = request_specs_arg(requests, "build_dcp_decode_metadata");
        const Device dev = device_arg(device);
        py::gil_scoped_release release;
        return PyDcpDecodePlan{std::make_shared<DcpDecodePlan>(build_dcp_decode_metadata(builder, specs, dcp, dev))};
      },
      py::arg("builder"), py::arg("requests"), py::arg("dcp"), py::arg("device") = "cpu",
      "requests in global terms (query_len, global num_computed_tokens) with this rank's LOCAL block tables.");
  m.def(
      "build_dcp_metadata",
      [](const MlaMetadataBuilder& builder, py::handle requests, const DcpConfig& dcp, py::handle device) {
        const std::vector<RequestSpec> specs = request_specs_arg(requests, "build_dcp_metadata");
        const Device dev = device_arg(device);
        py::gil_scoped_release release;
        return PyDcpDecodePlan{std::make_shared<DcpDecodePlan>(build_dcp_metadata(builder, specs, dcp, dev))};
      },
      py::arg("builder"), py::arg("requests"), py::arg("dcp"), py::arg("device") = "cpu",
      "A mixed batch (decodes first, then prefills with cached context) in global terms with this rank's LOCAL "
      "block tables; prefills attend to the rank's share of their context (docs/dcp.md).");
}

}  // namespace lattn::python
