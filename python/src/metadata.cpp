// The metadata builder and its views (lattn/metadata.h): the per-step plan.
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "bind.h"
#include "convert.h"
#include "lattn/common_metadata.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "mla_metadata.h"
#include "prefill_metadata.h"

namespace lattn::python {
namespace {

struct PyDecodeMetadata {
  DecodeMetadata view;
  std::shared_ptr<void> owner;
};

// A CommonAttentionMetadata viewing the caller's arrays, kept alive with it.
struct PyCommonAttentionMetadata {
  CommonAttentionMetadata view;
  std::vector<std::shared_ptr<void>> keep_alive;
};

PyTensor array(const Tensor& t, std::shared_ptr<void> owner) { return PyTensor{t, std::move(owner)}; }

constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min(), kI32Max = std::numeric_limits<int32_t>::max();

bool is_sequence(py::handle obj) {
  return py::isinstance<py::sequence>(obj) && !py::isinstance<py::str>(obj) && !py::isinstance<py::bytes>(obj);
}

// A block table given as a sequence of int32 block ids (list, tuple, NumPy array).
std::vector<int32_t> block_table_arg(py::handle obj, const char* op, const std::string& arg) {
  if (!is_sequence(obj) && !py::hasattr(obj, "__iter__")) {
    throw py::type_error(std::string(op) + ": argument '" + arg + "' must be a sequence of int block ids, got " +
                         type_name(obj));
  }
  std::vector<int32_t> table;
  size_t j = 0;
  for (py::handle v : obj) {
    const std::string item = arg + "[" + std::to_string(j++) + "]";
    table.push_back(int32_t(int_arg(v, op, item.c_str(), kI32Min, kI32Max)));
  }
  return table;
}

// requests[i]: a RequestSpec or a (query_len, num_computed_tokens, block_table) sequence.
RequestSpec request_arg(py::handle r, size_t i, const char* op) {
  if (py::isinstance<RequestSpec>(r)) return r.cast<RequestSpec>();
  const std::string arg = "requests[" + std::to_string(i) + "]";
  if (!is_sequence(r)) {
    throw py::type_error(
        std::string(op) + ": argument '" + arg +
        "' must be a lattn.RequestSpec or a (query_len, num_computed_tokens, block_table) tuple, got " + type_name(r));
  }
  const py::sequence t = py::reinterpret_borrow<py::sequence>(r);
  if (t.size() != 3) {
    throw ValueError(std::string(op) + ": argument '" + arg +
                     "' must have 3 items (query_len, num_computed_tokens, block_table), got " +
                     std::to_string(t.size()));
  }
  return RequestSpec{int32_t(int_arg(t[0], op, (arg + "[0] (query_len)").c_str(), kI32Min, kI32Max)),
                     int32_t(int_arg(t[1], op, (arg + "[1] (num_computed_tokens)").c_str(), kI32Min, kI32Max)),
                     block_table_arg(t[2], op, arg + "[2] (block_table)")};
}

std::vector<RequestSpec> requests_arg(py::handle requests, const char* op) {
  if (!is_sequence(requests) && !py::hasattr(requests, "__iter__")) {
    throw py::type_error(std::string(op) + ": argument 'requests' must be a sequence of requests, got " +
                         type_name(requests));
  }
  std::vector<RequestSpec> specs;
  for (py::handle r : requests) specs.push_back(request_arg(r, specs.size(), op));
  return specs;
}

}  // namespace

std::vector<RequestSpec> request_specs_arg(py::handle requests, const char* op) { return requests_arg(requests, op); }

void bind_metadata(py::module_& m) {
  m.attr("PAD_SLOT_ID") = PAD_SLOT_ID;
  m.def("mla_context_chunk_workspace_size", &mla_context_chunk_workspace_size, py::arg("max_model_len"),
        py::arg("max_num_seqs"), py::arg("block_size"),
        "The seeds' workspace rows: min(max(8*max_model_len, 4*max_num_seqs*block_size), 128*1024).");
  m.def("mla_supported_head_sizes", &mla_supported_head_sizes);

  py::class_<RequestSpec>(m, "RequestSpec", "One request of a batch (decodes first).")
      .def(py::init([](py::handle q, py::handle c, py::handle table) {
             const char* op = "RequestSpec";
             return RequestSpec{int32_t(int_arg(q, op, "query_len", kI32Min, kI32Max)),
                                int32_t(int_arg(c, op, "num_computed_tokens", kI32Min, kI32Max)),
                                table.is_none() ? std::vector<int32_t>{} : block_table_arg(table, op, "block_table")};
           }),
           py::arg("query_len"), py::arg("num_computed_tokens") = 0, py::arg("block_table") = py::none())
      .def_readwrite("query_len", &RequestSpec::query_len)
      .def_readwrite("num_computed_tokens", &RequestSpec::num_computed_tokens)
      .def_readwrite("block_table", &RequestSpec::block_table);

  py::class_<CudaGraphConfig>(m, "CudaGraphConfig", "Capacities of the builder's CUDA-graph buffers.")
      .def(py::init([](int max_batch_size, int max_seq_len_to_capture, int max_blocks_per_seq, std::vector<int> sizes) {
             return CudaGraphConfig{max_batch_size, max_seq_len_to_capture, max_blocks_per_seq, std::move(sizes)};
           }),
           py::arg("max_batch_size"), py::arg("max_seq_len_to_capture"), py::arg("max_blocks_per_seq") = 0,
           py::arg("capture_sizes") = std::vector<int>{})
      .def_readonly("max_batch_size", &CudaGraphConfig::max_batch_size)
      .def_readonly("max_seq_len_to_capture", &CudaGraphConfig::max_seq_len_to_capture)
      .def_readonly("capture_sizes", &CudaGraphConfig::capture_sizes);

  py::class_<PyCommonAttentionMetadata>(m, "CommonAttentionMetadata", R"doc(
vLLM v1's CommonAttentionMetadata viewing the caller's arrays (the seed's
constructor, argument order included; like the seed it writes PAD_SLOT_ID
into slot_mapping[num_actual_tokens:] of the caller's array).)doc")
      .def(py::init([](py::object qsl, py::object qsl_cpu, py::object seq_lens, py::object seq_lens_cpu,
                       py::object num_computed_tokens_cpu, int num_reqs, int num_actual_tokens, int max_query_len,
                       py::object block_table_tensor, py::object slot_mapping) {
             ArrayArgs args("CommonAttentionMetadata", py::none());
             PyCommonAttentionMetadata c;
             auto take = [&](py::handle obj, const char* arg) {
               if (obj.is_none()) return Tensor();
               PyTensor t = args.get_with_owner(obj, arg);
               // The constructor writes PAD_SLOT_ID into the tail of slot_mapping.
               if (t.read_only && std::string(arg) == "slot_mapping") throw_read_only("CommonAttentionMetadata", arg);
               c.keep_alive.push_back(t.owner);
               return t.view;
             };
             c.view = CommonAttentionMetadata(
                 take(qsl, "query_start_loc"), take(qsl_cpu, "query_start_loc_cpu"), take(seq_lens, "seq_lens"),
                 take(seq_lens_cpu, "seq_lens_cpu"), take(num_computed_tokens_cpu, "num_computed_tokens_cpu"), num_reqs,
                 num_actual_tokens, max_query_len, take(block_table_tensor, "block_table_tensor"),
                 take(slot_mapping, "slot_mapping"));
             return c;
           }),
           py::arg("query_start_loc"), py::arg("query_start_loc_cpu"), py::arg("seq_lens"), py::arg("seq_lens_cpu"),
           py::arg("num_computed_tokens_cpu"), py::arg("num_reqs"), py::arg("num_actual_tokens"),
           py::arg("max_query_len"), py::arg("block_table_tensor"), py::arg("slot_mapping"))
      .def_property_readonly("num_reqs", [](const PyCommonAttentionMetadata& c) { return c.view.num_reqs; })
      .def_property_readonly("num_actual_tokens",
                             [](const PyCommonAttentionMetadata& c) { return c.view.num_actual_tokens; });

  py::class_<PyMlaMetadata> md(m, "MlaMetadata", R"doc(
The attention metadata of one step (decodes first, then prefills). Arrays
are lattn.Tensor views (X on the metadata's device, X_cpu on the host); read
.prefill / .decode after to_device() to get the device views.)doc");
  md.def_property_readonly("num_reqs", [](const PyMlaMetadata& s) { return s.md->num_reqs; })
      .def_property_readonly("num_actual_tokens", [](const PyMlaMetadata& s) { return s.md->num_actual_tokens; })
      .def_property_readonly("num_decodes", [](const PyMlaMetadata& s) { return s.md->num_decodes; })
      .def_property_readonly("num_prefills", [](const PyMlaMetadata& s) { return s.md->num_prefills; })
      .def_property_readonly("num_decode_tokens", [](const PyMlaMetadata& s) { return s.md->num_decode_tokens; })
      .def_property_readonly("num_prefill_tokens", [](const PyMlaMetadata& s) { return s.md->num_prefill_tokens; })
      .def_property_readonly("max_query_len", [](const PyMlaMetadata& s) { return s.md->max_query_len; })
      .def_property_readonly("max_decode_query_len", [](const PyMlaMetadata& s) { return s.md->max_decode_query_len; })
      .def_property_readonly("max_prefill_seq_len", [](const PyMlaMetadata& s) { return s.md->max_prefill_seq_len; })
      .def_property_readonly("max_decode_seq_len", [](const PyMlaMetadata& s) { return s.md->max_decode_seq_len; })
      .def_property_readonly("block_size", [](const PyMlaMetadata& s) { return s.md->block_size; })
      .def_property_readonly("use_cuda_graph", [](const PyMlaMetadata& s) { return s.md->use_cuda_graph; })
      .def_property_readonly("is_profile_run", [](const PyMlaMetadata& s) { return s.md->is_profile_run; })
      .def_property_readonly("context_chunk_workspace_size",
                             [](const PyMlaMetadata& s) { return s.md->context_chunk_workspace_size; })
      .def_property_readonly("device", [](const PyMlaMetadata& s) { return device_name(s.md->device); })
      .def_property_readonly(
          "prefill",
          [](const PyMlaMetadata& s) -> py::object {
            if (!s.md->prefill) return py::none();
            PyPrefillMetadata p{*s.md->prefill, {s.md}};
            return py::cast(std::move(p));
          },
          "The prefill view (None without prefills): what a prefill backend's prepare_metadata takes.")
      .def_property_readonly(
          "decode",
          [](const PyMlaMetadata& s) -> py::object {
            if (!s.md->decode) return py::none();
            return py::cast(PyDecodeMetadata{*s.md->decode, s.md});
          },
          "The decode view (None without decodes).")
      .def(
          "to_device",
          [](PyMlaMetadata& s, py::handle device, py::object stream) {
            const Stream st =
                stream.is_none()
                    ? nullptr
                    : reinterpret_cast<Stream>(static_cast<intptr_t>(
                          int_arg(stream, "MlaMetadata.to_device", "stream", 0, std::numeric_limits<int64_t>::max())));
            s.md->to_device(device_arg(device), st);
          },
          py::arg("device"), py::arg("stream") = py::none(),
          "Copies every index array to device (asynchronously on stream, an int cudaStream_t; None = the default).")
      .def("__repr__", [](const PyMlaMetadata& s) {
        return "MlaMetadata(num_decodes=" + std::to_string(s.md->num_decodes) +
               ", num_prefills=" + std::to_string(s.md->num_prefills) +
               ", num_actual_tokens=" + std::to_string(s.md->num_actual_tokens) +
               ", device=" + device_name(s.md->device) + ")";
      });
  auto md_pair = [&md](const char* name, Tensor MlaMetadata::*dev, Tensor MlaMetadata::*host) {
    md.def_property_readonly(name, [dev](const PyMlaMetadata& s) { return array((*s.md).*dev, s.md); });
    md.def_property_readonly((std::string(name) + "_cpu").c_str(),
                             [host](const PyMlaMetadata& s) { return array((*s.md).*host, s.md); });
  };
  md_pair("query_start_loc", &MlaMetadata::query_start_loc, &MlaMetadata::query_start_loc_cpu);
  md_pair("seq_start_loc", &MlaMetadata::seq_start_loc, &MlaMetadata::seq_start_loc_cpu);
  md_pair("seq_lens", &MlaMetadata::seq_lens, &MlaMetadata::seq_lens_cpu);
  md_pair("context_lens", &MlaMetadata::context_lens, &MlaMetadata::context_lens_cpu);
  md_pair("block_table", &MlaMetadata::block_table, &MlaMetadata::block_table_cpu);
  md_pair("slot_mapping", &MlaMetadata::slot_mapping, &MlaMetadata::slot_mapping_cpu);

  py::class_<PyDecodeMetadata> dec(m, "DecodeMetadata", "The decode rows of a step (requests [0, num_decodes)).");
  dec.def_property_readonly("num_decodes", [](const PyDecodeMetadata& s) { return s.view.num_decodes; })
      .def_property_readonly("num_decode_tokens", [](const PyDecodeMetadata& s) { return s.view.num_decode_tokens; })
      .def_property_readonly("max_decode_query_len",
                             [](const PyDecodeMetadata& s) { return s.view.max_decode_query_len; })
      .def_property_readonly("max_decode_seq_len", [](const PyDecodeMetadata& s) { return s.view.max_decode_seq_len; });
  auto dec_pair = [&dec](const char* name, Tensor DecodeMetadata::*dev, Tensor DecodeMetadata::*host) {
    dec.def_property_readonly(name, [dev](const PyDecodeMetadata& s) { return array(s.view.*dev, s.owner); });
    dec.def_property_readonly((std::string(name) + "_cpu").c_str(),
                              [host](const PyDecodeMetadata& s) { return array(s.view.*host, s.owner); });
  };
  dec_pair("query_start_loc", &DecodeMetadata::query_start_loc, &DecodeMetadata::query_start_loc_cpu);
  dec_pair("seq_lens", &DecodeMetadata::seq_lens, &DecodeMetadata::seq_lens_cpu);
  dec_pair("block_table", &DecodeMetadata::block_table, &DecodeMetadata::block_table_cpu);
  dec_pair("slot_mapping", &DecodeMetadata::slot_mapping, &DecodeMetadata::slot_mapping_cpu);

  py::class_<MlaMetadataBuilder>(m, "MlaMetadataBuilder", "Builds a step's MlaMetadata from a batch description.")
      // Every argument is checked by name (TypeError / ValueError), never by
      // pybind11's signature dump; the builder checks the values' meaning.
      .def(py::init([](py::handle block_size, py::handle chunked_prefill_enabled, py::handle enable_prefix_caching,
                       py::handle context_chunk_workspace_size, py::handle reorder_batch_threshold,
                       py::handle sliding_window, py::handle num_cache_blocks, py::handle head_dim,
                       py::handle cudagraph, py::handle batch_invariant, py::handle batch_invariant_context_chunk) {
             constexpr const char* op = "MlaMetadataBuilder";
             constexpr int64_t kInt = std::numeric_limits<int>::max();
             constexpr int64_t kI64 = std::numeric_limits<int64_t>::max();
             const auto optional_int = [&](py::handle v, const char* arg) -> std::optional<int> {
               if (v.is_none()) return std::nullopt;
               return int(int_arg(v, op, arg, -kInt, kInt));
             };
             MetadataBuilderConfig c;
             c.batch_invariant = bool_arg(batch_invariant, op, "batch_invariant");
             c.batch_invariant_context_chunk =
                 int_arg(batch_invariant_context_chunk, op, "batch_invariant_context_chunk", -kI64, kI64);
             c.block_size = int(int_arg(block_size, op, "block_size", -kInt, kInt));
             c.chunked_prefill_enabled = bool_arg(chunked_prefill_enabled, op, "chunked_prefill_enabled");
             c.enable_prefix_caching = bool_arg(enable_prefix_caching, op, "enable_prefix_caching");
             c.context_chunk_workspace_size =
                 int_arg(context_chunk_workspace_size, op, "context_chunk_workspace_size", -kI64, kI64);
             c.reorder_batch_threshold =
                 int(int_arg(reorder_batch_threshold, op, "reorder_batch_threshold", -kInt, kInt));
             c.sliding_window = optional_int(sliding_window, "sliding_window");
             c.num_cache_blocks = int_arg(num_cache_blocks, op, "num_cache_blocks", -kI64, kI64);
             c.head_dim = optional_int(head_dim, "head_dim");
             if (!cudagraph.is_none())
               c.cudagraph = class_arg<CudaGraphConfig>(cudagraph, op, "cudagraph", "CudaGraphConfig");
             return MlaMetadataBuilder(std::move(c));
           }),
           py::arg("block_size") = 16, py::arg("chunked_prefill_enabled") = true,
           py::arg("enable_prefix_caching") = false, py::arg("context_chunk_workspace_size") = 0,
           py::arg("reorder_batch_threshold") = 1, py::arg("sliding_window") = py::none(),
           py::arg("num_cache_blocks") = 0, py::arg("head_dim") = py::none(), py::arg("cudagraph") = py::none(),
           py::arg("batch_invariant") = false, py::arg("batch_invariant_context_chunk") = 0)
      .def(
          "build",
          [](const MlaMetadataBuilder& b, py::handle requests, py::handle is_profile_run,
             py::handle cudagraph_batch_size) {
            constexpr const char* op = "MlaMetadataBuilder.build";
            const std::vector<RequestSpec> specs = requests_arg(requests, op);
            BuildOptions options;
            options.is_profile_run = bool_arg(is_profile_run, op, "is_profile_run");
            if (!cudagraph_batch_size.is_none()) {
              options.cudagraph_batch_size =
                  int(int_arg(cudagraph_batch_size, op, "cudagraph_batch_size", std::numeric_limits<int>::min(),
                              std::numeric_limits<int>::max()));
            }
            py::gil_scoped_release release;
            return PyMlaMetadata{std::make_shared<MlaMetadata>(b.build(specs, options))};
          },
          py::arg("requests"), py::arg("is_profile_run") = false, py::arg("cudagraph_batch_size") = py::none(),
          "requests: RequestSpec objects or (query_len, num_computed_tokens, block_table) tuples, decodes first.")
      .def(
          "build_common",
          [](const MlaMetadataBuilder& b, py::handle common_obj, py::handle common_prefix_len, py::handle fast_build) {
            constexpr const char* op = "MlaMetadataBuilder.build_common";
            const PyCommonAttentionMetadata& common =
                class_arg<PyCommonAttentionMetadata>(common_obj, op, "common", "CommonAttentionMetadata");
            const int prefix = int(int_arg(common_prefix_len, op, "common_prefix_len", std::numeric_limits<int>::min(),
                                           std::numeric_limits<int>::max()));
            const bool fast = bool_arg(fast_build, op, "fast_build");
            return PyMlaMetadata{std::make_shared<MlaMetadata>(b.build(common.view, prefix, fast))};
          },
          py::arg("common"), py::arg("common_prefix_len") = 0, py::arg("fast_build") = false,
          "The v1 entry point: build(common_prefix_len, common_attn_metadata, fast_build).")
      .def(
          "padded_batch_size",
          [](const MlaMetadataBuilder& b, py::handle num_reqs) {
            return b.padded_batch_size(int(int_arg(num_reqs, "MlaMetadataBuilder.padded_batch_size", "num_reqs",
                                                   std::numeric_limits<int>::min(), std::numeric_limits<int>::max())));
          },
          py::arg("num_reqs"))
      .def(
          "build_for_cudagraph",
          [](const MlaMetadataBuilder& b, py::handle requests, py::handle batch_size_obj) {
            constexpr const char* op = "MlaMetadataBuilder.build_for_cudagraph";
            std::optional<int> batch_size;
            if (!batch_size_obj.is_none()) {
              batch_size = int(int_arg(batch_size_obj, op, "batch_size", std::numeric_limits<int>::min(),
                                       std::numeric_limits<int>::max()));
            }
            return PyMlaMetadata{
                std::make_shared<MlaMetadata>(b.build_for_cudagraph(requests_arg(requests, op), batch_size))};
          },
          py::arg("requests"), py::arg("batch_size") = py::none());
}

}  // namespace lattn::python
