// Backend classes (what a backend supports, validate_configuration, create)
// and prefill backend instances (prepare_metadata, run_*), for engines that
// drive a backend themselves (lattn.vllm does).
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "backends.h"
#include "bind.h"
#include "convert.h"
#include "lattn/check.h"
#include "prefill_metadata.h"

namespace lattn::python {
namespace {

py::list dtype_names(const std::vector<DType>& dtypes) {
  py::list names;
  for (DType t : dtypes) names.append(dtype_name(t));
  return names;
}

// A prefill backend instance and the metadata it was prepared with (the
// backend keeps a pointer to the view, so the view must live as long).
struct PyPrefillBackend {
  std::unique_ptr<PrefillBackend> backend;
  py::object metadata;
};

constexpr const char* kNewTokens = "run_prefill_new_tokens";
constexpr const char* kContextChunk = "run_prefill_context_chunk";

// The out / lse arrays of a run: the caller's, or new ones of q's framework.
struct RunOutputs {
  py::object out, lse;
  Tensor out_view, lse_view;
};

RunOutputs outputs_for(ArrayArgs& args, py::handle q_obj, const Tensor& q, const Tensor& v, py::object out,
                       py::object lse, bool want_lse, DType out_dtype) {
  check_dim(args.op(), "q", q, 3);
  check_dim(args.op(), "v", v, 3);
  RunOutputs r;
  r.out = out.is_none() ? empty_like_framework(q_obj, {q.size(0), q.size(1), v.size(2)}, out_dtype, q.device()) : out;
  r.out_view = args.get_writable(r.out, "out");
  if (want_lse) {
    r.lse = lse.is_none() ? empty_like_framework(q_obj, {q.size(1), q.size(0)}, DType::f32, q.device()) : lse;
    r.lse_view = args.get_writable(r.lse, "lse");
  } else {
    r.lse = py::none();
  }
  return r;
}

}  // namespace

void bind_backends(py::module_& m) {
  py::class_<PyPrefillBackendClass>(m, "PrefillBackendClass", R"doc(
A prefill backend class: what it supports and why it refuses a
configuration (the seeds' classmethods), and a factory for instances.)doc")
      .def_property_readonly("name", [](const PyPrefillBackendClass& c) { return c.cls->name(); })
      .def("get_name", [](const PyPrefillBackendClass& c) { return c.cls->name(); })
      .def("supported_dtypes", [](const PyPrefillBackendClass& c) { return dtype_names(c.cls->supported_dtypes()); })
      .def("supported_mla_dimensions", [](const PyPrefillBackendClass& c) { return c.cls->supported_mla_dimensions(); })
      .def("requires_r1_mla_dimensions",
           [](const PyPrefillBackendClass& c) { return c.cls->requires_r1_mla_dimensions(); })
      .def(
          "supports_compute_capability",
          [](const PyPrefillBackendClass& c, std::optional<DeviceCapability> cap) {
            return c.cls->supports_compute_capability(cap);
          },
          py::arg("capability"), "capability None = the CPU.")
      .def(
          "supports_dtype",
          [](const PyPrefillBackendClass& c, py::handle d) { return c.cls->supports_dtype(dtype_arg(d)); },
          py::arg("dtype"))
      .def("is_available", [](const PyPrefillBackendClass& c) { return c.cls->is_available(); })
      .def(
          "supports_quant_output",
          [](const PyPrefillBackendClass& c, const std::string& key) {
            return c.cls->supports_quant_output(quant_key_arg(key));
          },
          py::arg("quant_key"))
      .def(
          "validate_configuration",
          [](const PyPrefillBackendClass& c, std::optional<DeviceCapability> cap, const SelectorConfig& config) {
            return c.cls->validate_configuration(cap, config);
          },
          py::arg("capability"), py::arg("config"),
          "Ordered reasons this backend cannot serve config on a device of this capability (None = the CPU); "
          "[] = valid. The seeds' texts.")
      .def(
          "create",
          [](const PyPrefillBackendClass& c, int num_heads, float scale, int kv_lora_rank, int qk_nope_head_dim,
             int qk_rope_head_dim, int v_head_dim, py::handle dtype, py::handle device, int num_threads) {
            PrefillBackendParams p;
            p.num_heads = num_heads;
            p.scale = scale;
            p.kv_lora_rank = kv_lora_rank;
            p.qk_nope_head_dim = qk_nope_head_dim;
            p.qk_rope_head_dim = qk_rope_head_dim;
            p.v_head_dim = v_head_dim;
            p.dtype = dtype_arg(dtype);
            p.context.device = device_arg(device);
            p.context.num_threads = num_threads;
            return PyPrefillBackend{c.cls->create(p), py::none()};
          },
          py::arg("num_heads"), py::arg("scale"), py::arg("kv_lora_rank"), py::arg("qk_nope_head_dim"),
          py::arg("qk_rope_head_dim"), py::arg("v_head_dim"), py::arg("dtype") = "bf16", py::arg("device") = "cpu",
          py::arg("num_threads") = 0, "A backend instance for one layer configuration (the seeds' __init__).")
      .def("__repr__", [](const PyPrefillBackendClass& c) { return "PrefillBackendClass('" + c.cls->name() + "')"; });

  py::class_<PyPrefillBackend>(m, "PrefillBackend", R"doc(
A prefill backend instance: prepare_metadata plans a step, run_* launch.
Arrays: q, k [T, N, P+R]; v [T, N, V]; out [T, N, V]; lse [N, T] float32
(natural log). Missing out/lse are allocated by q's framework (torch.empty,
numpy.empty) or as lattn.Tensor. CUDA work runs on `stream`, by default the
caller's current stream.)doc")
      .def_property_readonly("name", [](const PyPrefillBackend& b) { return b.backend->name(); })
      .def(
          "prepare_metadata",
          [](PyPrefillBackend& b, py::object metadata) {
            const auto& md = class_arg<PyPrefillMetadata>(metadata, "prepare_metadata", "metadata", "PrefillMetadata");
            b.backend->prepare_metadata(md.view);
            b.metadata = std::move(metadata);
          },
          py::arg("prefill_metadata"))
      .def(
          "supports_quant_output",
          [](const PyPrefillBackend& b, const std::string& key) {
            return b.backend->supports_quant_output(quant_key_arg(key));
          },
          py::arg("quant_key"))
      .def(
          "run_prefill_new_tokens",
          [](PyPrefillBackend& b, py::object q, py::object k, py::object v, py::handle return_lse_obj, py::object out,
             py::object lse, py::object output_scale, py::object stream) {
            if (!PyBool_Check(return_lse_obj.ptr()) && type_name(return_lse_obj) != "numpy.bool_") {
              throw py::type_error(std::string(kNewTokens) + ": argument 'return_softmax_lse' must be a bool, got " +
                                   type_name(return_lse_obj));
            }
            const bool return_softmax_lse = PyObject_IsTrue(return_lse_obj.ptr()) == 1;
            ArrayArgs args(kNewTokens, stream);
            const Tensor tq = args.get(q, "q"), tk = args.get(k, "k"), tv = args.get(v, "v");
            const Tensor scale = args.get_optional(output_scale, "output_scale");
            RunOutputs r = outputs_for(args, q, tq, tv, out, lse, return_softmax_lse,
                                       scale.defined() ? DType::fp8_e4m3 : tq.dtype());
            b.backend->set_stream(args.stream());
            {
              py::gil_scoped_release release;
              b.backend->run_prefill_new_tokens(tq, tk, tv, return_softmax_lse, r.out_view, r.lse_view, scale);
            }
            return py::make_tuple(r.out, r.lse);
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("return_softmax_lse"), py::arg("out") = py::none(),
          py::arg("lse") = py::none(), py::arg("output_scale") = py::none(), py::arg("stream") = py::none(),
          "Causal attention of each prefill's new tokens. Returns (out, lse); lse is None unless return_softmax_lse.")
      .def(
          "run_prefill_context_chunk",
          [](PyPrefillBackend& b, py::handle chunk_idx_obj, py::object q, py::object k, py::object v, py::object out,
             py::object lse, py::object stream) {
            const int chunk_idx =
                int(int_arg(chunk_idx_obj, kContextChunk, "chunk_idx", 0, std::numeric_limits<int>::max()));
            ArrayArgs args(kContextChunk, stream);
            const Tensor tq = args.get(q, "q"), tk = args.get(k, "k"), tv = args.get(v, "v");
            RunOutputs r = outputs_for(args, q, tq, tv, out, lse, true, tq.dtype());
            b.backend->set_stream(args.stream());
            {
              py::gil_scoped_release release;
              b.backend->run_prefill_context_chunk(chunk_idx, tq, tk, tv, r.out_view, r.lse_view);
            }
            return py::make_tuple(r.out, r.lse);
          },
          py::arg("chunk_idx"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out") = py::none(),
          py::arg("lse") = py::none(), py::arg("stream") = py::none(),
          "Non-causal attention of the new tokens against context chunk chunk_idx. Returns (out, lse).")
      .def("__repr__", [](const PyPrefillBackend& b) { return "PrefillBackend('" + b.backend->name() + "')"; });

  py::class_<PyDecodeBackendClass>(m, "DecodeBackendClass", "A decode backend class: what it supports, and why not.")
      .def_property_readonly("name", [](const PyDecodeBackendClass& c) { return c.cls->name(); })
      .def("supported_dtypes", [](const PyDecodeBackendClass& c) { return dtype_names(c.cls->supported_dtypes()); })
      .def("supported_kv_cache_dtypes",
           [](const PyDecodeBackendClass& c) { return dtype_names(c.cls->supported_kv_cache_dtypes()); })
      .def("supported_block_sizes", [](const PyDecodeBackendClass& c) { return c.cls->supported_block_sizes(); })
      .def("max_query_tokens_per_request",
           [](const PyDecodeBackendClass& c) { return c.cls->max_query_tokens_per_request(); })
      .def("supports_cuda_graphs", [](const PyDecodeBackendClass& c) { return c.cls->supports_cuda_graphs(); })
      .def(
          "supports_compute_capability",
          [](const PyDecodeBackendClass& c, std::optional<DeviceCapability> cap) {
            return c.cls->supports_compute_capability(cap);
          },
          py::arg("capability"))
      .def(
          "supports_dtype",
          [](const PyDecodeBackendClass& c, py::handle d) { return c.cls->supports_dtype(dtype_arg(d)); },
          py::arg("dtype"))
      .def("is_available", [](const PyDecodeBackendClass& c) { return c.cls->is_available(); })
      .def(
          "validate_configuration",
          [](const PyDecodeBackendClass& c, std::optional<DeviceCapability> cap, const SelectorConfig& config) {
            return c.cls->validate_configuration(cap, config);
          },
          py::arg("capability"), py::arg("config"))
      .def("__repr__", [](const PyDecodeBackendClass& c) { return "DecodeBackendClass('" + c.cls->name() + "')"; });
}

}  // namespace lattn::python
