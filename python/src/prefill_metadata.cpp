// lattn.PrefillMetadata: a prefill view made from an engine's arrays (the
// vLLM adapter's prepare_metadata), for PrefillBackend.prepare_metadata.
#include "prefill_metadata.h"

#include <limits>
#include <optional>
#include <string>

#include "arrays.h"
#include "bind.h"
#include "convert.h"
#include "lattn/check.h"
#include "lattn/errors.h"

namespace lattn::python {
namespace {

constexpr const char* kOp = "PrefillMetadata.from_arrays";

// An index array and its host copy: the host copy is `host` when given, else
// `device` itself when that is on the host; ValueError when neither is.
std::pair<Tensor, Tensor> index_pair(ArrayArgs& args, PyPrefillMetadata& md, py::handle device_obj, py::handle host_obj,
                                     const char* arg, const char* host_arg) {
  PyTensor device = args.get_with_owner(device_obj, arg);
  md.keep_alive.push_back(device.owner);
  check_dtype(kOp, arg, device.view, DType::i32);
  Tensor host = device.view;
  if (!host_obj.is_none()) {
    PyTensor h = args.get_with_owner(host_obj, host_arg);
    md.keep_alive.push_back(h.owner);
    check_dtype(kOp, host_arg, h.view, DType::i32);
    check_device(kOp, host_arg, h.view, Device::cpu());
    check_arg(h.view.shape().size() == device.view.shape().size() &&
                  std::equal(h.view.shape().begin(), h.view.shape().end(), device.view.shape().begin()),
              kOp, host_arg, "have the shape of '" + std::string(arg) + "' " + device.view.shape_str(),
              h.view.shape_str());
    host = h.view;
  } else {
    check_arg(device.view.device().is_cpu(), kOp, host_arg,
              std::string("be given when '") + arg + "' is not on the cpu", "None");
  }
  return {device.view, host};
}

int32_t at_i32(const Tensor& t, int64_t i) { return *static_cast<const int32_t*>(t.ptr_at({i})); }

PyPrefillMetadata from_arrays(py::handle query_start_loc, py::handle max_query_len_obj, py::handle query_start_loc_cpu,
                              py::handle chunk_cu_seq_lens, py::handle chunk_cu_seq_lens_cpu, py::handle chunk_starts,
                              py::handle chunk_starts_cpu, std::optional<std::vector<int32_t>> chunk_seq_tot,
                              std::optional<std::vector<int32_t>> chunk_max_seq_lens, py::handle block_size_obj) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  const int max_query_len = int(int_arg(max_query_len_obj, kOp, "max_query_len", 0, kIntMax));
  const int block_size = int(int_arg(block_size_obj, kOp, "block_size", 0, kIntMax));
  ArrayArgs args(kOp, py::none());
  PyPrefillMetadata md;
  PrefillMetadata& p = md.view;
  std::tie(p.query_start_loc, p.query_start_loc_cpu) =
      index_pair(args, md, query_start_loc, query_start_loc_cpu, "query_start_loc", "query_start_loc_cpu");
  check_dim(kOp, "query_start_loc", p.query_start_loc, 1);
  check_arg(p.query_start_loc.size(0) >= 2, kOp, "query_start_loc", "hold num_prefills + 1 >= 2 entries",
            p.query_start_loc.shape_str());
  p.num_prefills = int(p.query_start_loc.size(0) - 1);
  check_arg(at_i32(p.query_start_loc_cpu, 0) == 0, kOp, "query_start_loc", "start at 0 (rebased to the prefills)",
            std::to_string(at_i32(p.query_start_loc_cpu, 0)));
  p.num_prefill_tokens = at_i32(p.query_start_loc_cpu, p.num_prefills);
  int longest = 0;
  for (int r = 0; r < p.num_prefills; ++r) {
    const int len = at_i32(p.query_start_loc_cpu, r + 1) - at_i32(p.query_start_loc_cpu, r);
    check_arg(len > 0, kOp, "query_start_loc", "increase strictly (every prefill has new tokens)",
              "query length " + std::to_string(len) + " for prefill " + std::to_string(r));
    longest = std::max(longest, len);
  }
  check_arg(max_query_len >= longest, kOp, "max_query_len", ">= the longest query " + std::to_string(longest),
            std::to_string(max_query_len));
  p.max_query_len = max_query_len;
  p.block_size = block_size;

  if (chunk_cu_seq_lens.is_none()) {
    check_arg(!chunk_seq_tot || chunk_seq_tot->empty(), kOp, "chunk_seq_tot", "be None without chunk_cu_seq_lens",
              "a list");
    return md;
  }
  ContextChunkPlan& c = p.chunks;
  std::tie(c.cu_seq_lens, c.cu_seq_lens_cpu) =
      index_pair(args, md, chunk_cu_seq_lens, chunk_cu_seq_lens_cpu, "chunk_cu_seq_lens", "chunk_cu_seq_lens_cpu");
  check_dim(kOp, "chunk_cu_seq_lens", c.cu_seq_lens, 2);
  c.num_chunks = int(c.cu_seq_lens.size(0));
  check_shape(kOp, "chunk_cu_seq_lens", c.cu_seq_lens, {c.num_chunks, p.num_prefills + 1});
  if (!chunk_starts.is_none()) {
    std::tie(c.starts, c.starts_cpu) =
        index_pair(args, md, chunk_starts, chunk_starts_cpu, "chunk_starts", "chunk_starts_cpu");
    check_shape(kOp, "chunk_starts", c.starts, {c.num_chunks, p.num_prefills});
  }
  check_arg(chunk_seq_tot && int(chunk_seq_tot->size()) == c.num_chunks, kOp, "chunk_seq_tot",
            "list num_chunks = " + std::to_string(c.num_chunks) + " totals",
            chunk_seq_tot ? std::to_string(chunk_seq_tot->size()) + " entries" : "None");
  check_arg(chunk_max_seq_lens && int(chunk_max_seq_lens->size()) == c.num_chunks, kOp, "chunk_max_seq_lens",
            "list num_chunks = " + std::to_string(c.num_chunks) + " lengths",
            chunk_max_seq_lens ? std::to_string(chunk_max_seq_lens->size()) + " entries" : "None");
  c.seq_tot = *chunk_seq_tot;
  c.max_seq_lens = *chunk_max_seq_lens;
  for (int i = 0; i < c.num_chunks; ++i) {
    const Tensor row = c.cu_seq_lens_cpu.select(0, i);
    check_arg(at_i32(row, 0) == 0 && at_i32(row, p.num_prefills) == c.seq_tot[size_t(i)], kOp, "chunk_cu_seq_lens",
              "rows from 0 to chunk_seq_tot[i] (row " + std::to_string(i) + ": 0 to " +
                  std::to_string(c.seq_tot[size_t(i)]) + ")",
              std::to_string(at_i32(row, 0)) + " to " + std::to_string(at_i32(row, p.num_prefills)));
  }
  return md;
}

}  // namespace

void bind_prefill_metadata(py::module_& m) {
  py::class_<PyPrefillMetadata> cls(m, "PrefillMetadata", R"doc(
The prefill rows of one step, as a prefill backend plans with it: query
offsets (rebased to 0) and the context-chunk plan. Made by
PrefillMetadata.from_arrays from an engine's arrays (viewed, not copied), or
taken from lattn's metadata builder (MlaMetadata.prefill).)doc");
  cls.def_static("from_arrays", &from_arrays, py::arg("query_start_loc"), py::arg("max_query_len"),
                 py::arg("query_start_loc_cpu") = py::none(), py::arg("chunk_cu_seq_lens") = py::none(),
                 py::arg("chunk_cu_seq_lens_cpu") = py::none(), py::arg("chunk_starts") = py::none(),
                 py::arg("chunk_starts_cpu") = py::none(), py::arg("chunk_seq_tot") = py::none(),
                 py::arg("chunk_max_seq_lens") = py::none(), py::arg("block_size") = 0, R"doc(
  query_start_loc        [num_prefills + 1] int32, starting at 0
  chunk_cu_seq_lens      [num_chunks, num_prefills + 1] int32 (None: no context)
  chunk_starts           [num_chunks, num_prefills] int32 (optional)
  chunk_seq_tot, chunk_max_seq_lens   lists of num_chunks ints
  *_cpu                  host copies; required when the array is on a GPU)doc")
      .def_property_readonly("num_prefills", [](const PyPrefillMetadata& m) { return m.view.num_prefills; })
      .def_property_readonly("num_prefill_tokens", [](const PyPrefillMetadata& m) { return m.view.num_prefill_tokens; })
      .def_property_readonly("max_query_len", [](const PyPrefillMetadata& m) { return m.view.max_query_len; })
      .def_property_readonly("num_chunks", [](const PyPrefillMetadata& m) { return m.view.chunks.num_chunks; })
      .def_property_readonly("chunk_seq_tot", [](const PyPrefillMetadata& m) { return m.view.chunks.seq_tot; })
      .def_property_readonly("chunk_max_seq_lens",
                             [](const PyPrefillMetadata& m) { return m.view.chunks.max_seq_lens; })
      .def("has_context", [](const PyPrefillMetadata& m) { return m.view.has_context(); });
  auto array = [&cls](const char* name, Tensor PrefillMetadata::*member) {
    cls.def_property_readonly(name, [member](const PyPrefillMetadata& m) -> py::object {
      const Tensor& t = m.view.*member;
      if (!t.defined()) return py::none();
      return py::cast(PyTensor{t, std::make_shared<std::vector<std::shared_ptr<void>>>(m.keep_alive)});
    });
  };
  auto chunk_array = [&cls](const char* name, Tensor ContextChunkPlan::*member) {
    cls.def_property_readonly(name, [member](const PyPrefillMetadata& m) -> py::object {
      const Tensor& t = m.view.chunks.*member;
      if (!t.defined()) return py::none();
      return py::cast(PyTensor{t, std::make_shared<std::vector<std::shared_ptr<void>>>(m.keep_alive)});
    });
  };
  array("query_start_loc", &PrefillMetadata::query_start_loc);
  array("query_start_loc_cpu", &PrefillMetadata::query_start_loc_cpu);
  array("seq_lens_cpu", &PrefillMetadata::seq_lens_cpu);
  array("context_lens_cpu", &PrefillMetadata::context_lens_cpu);
  array("block_table", &PrefillMetadata::block_table);
  array("block_table_cpu", &PrefillMetadata::block_table_cpu);
  chunk_array("chunk_cu_seq_lens", &ContextChunkPlan::cu_seq_lens);
  chunk_array("chunk_cu_seq_lens_cpu", &ContextChunkPlan::cu_seq_lens_cpu);
  chunk_array("chunk_starts", &ContextChunkPlan::starts);
  chunk_array("chunk_starts_cpu", &ContextChunkPlan::starts_cpu);
  cls.def("__repr__", [](const PyPrefillMetadata& m) {
    return "PrefillMetadata(num_prefills=" + std::to_string(m.view.num_prefills) +
           ", num_prefill_tokens=" + std::to_string(m.view.num_prefill_tokens) +
           ", max_query_len=" + std::to_string(m.view.max_query_len) +
           ", num_chunks=" + std::to_string(m.view.chunks.num_chunks) + ")";
  });
}

}  // namespace lattn::python
