// MlaAttention: one MLA layer's forward over a mixed batch (lattn/attention.h).
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "arrays.h"
#include "bind.h"
#include "cache_ops.h"
#include "convert.h"
#include "dcp_objects.h"
#include "lattn/attention.h"
#include "lattn/check.h"
#include "lattn/errors.h"
#include "mla_metadata.h"

namespace lattn::python {
namespace {

// in_use covers the binding's set_stream + forward pair, so that two Python
// threads cannot interleave them (the layer itself refuses overlapping calls:
// lattn/attention.h, "Threads").
struct PyMlaAttention {
  std::shared_ptr<MlaAttention> layer;
  std::shared_ptr<Communicator> dcp_comm{};  // set_dcp's, kept alive while the layer uses it
  std::shared_ptr<std::atomic<bool>> in_use = std::make_shared<std::atomic<bool>>(false);
};

// Holds a PyMlaAttention for one forward (RuntimeError when another thread does).
class BindingUse {
 public:
  explicit BindingUse(std::atomic<bool>& in_use) : in_use_(in_use) {
    bool expected = false;
    if (!in_use_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
      throw RuntimeError(
          "MlaAttention.forward: this MlaAttention is already running a call on another thread; a "
          "layer's scratch memory serves one call at a time: give each thread its own layer, or "
          "serialize the calls");
    }
  }
  ~BindingUse() { in_use_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool>& in_use_;
};

}  // namespace

void bind_attention(py::module_& m) {
  py::class_<PyMlaAttention> cls(m, "MlaAttention", R"doc(
One MLA attention layer (seed 002's MLACommonImpl) on a paged latent cache:
  attn = MlaAttention(num_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, ...)
  attn.process_weights_after_loading(kv_b_proj_weight)   # [N*(P+V), L]
  out = attn.forward(q, kv_c_normed, k_pe, cache, metadata)   # [T, N*V]
Rows: decodes first, then prefills (the metadata's order).)doc");
  {
    // The arguments arrive as Python objects and are converted by name
    // (convert.h), so a wrong type is a TypeError naming the argument and what
    // it must be, not pybind11's signature dump or "Unable to cast". The
    // signature pybind11 would print then says "handle": the docstring's first
    // line gives the real one instead (scripts/gen_python_stubs.py reads it).
    py::options options;
    options.disable_function_signatures();
    cls.def(
        py::init([](py::handle num_heads, py::handle kv_lora_rank, py::handle qk_nope_head_dim,
                    py::handle qk_rope_head_dim, py::handle v_head_dim, py::handle scale, py::handle dtype,
                    py::handle kv_cache_dtype, py::handle device, py::handle prefill_backend, py::handle decode_backend,
                    py::handle block_size, py::handle max_query_tokens_per_request,
                    py::handle kv_sharing_target_layer_name, py::handle stream, py::handle batch_invariant,
                    py::handle index_topk, py::handle index_n_heads, py::handle index_head_dim,
                    py::handle sparse_backend, py::handle indexer_backend) {
          constexpr const char* op = "MlaAttention";
          // Types and int ranges checked here; the values' meaning by the layer's own validation.
          constexpr int64_t kLo = std::numeric_limits<int>::min(), kHi = std::numeric_limits<int>::max();
          const auto int32 = [&](py::handle v, const char* name) { return int(int_arg(v, op, name, kLo, kHi)); };
          MlaAttentionConfig c;
          c.dims = MlaDims{int32(num_heads, "num_heads"), int32(kv_lora_rank, "kv_lora_rank"),
                           int32(qk_nope_head_dim, "qk_nope_head_dim"), int32(qk_rope_head_dim, "qk_rope_head_dim"),
                           int32(v_head_dim, "v_head_dim")};
          c.scale = float(float_arg(scale, op, "scale"));
          c.dtype = dtype_arg(dtype);
          c.kv_cache_dtype = dtype_arg(kv_cache_dtype);
          c.device = device_arg(device);
          c.stream = stream.is_none() ? nullptr
                                      : reinterpret_cast<Stream>(static_cast<intptr_t>(
                                            int_arg(stream, op, "stream", 0, std::numeric_limits<int64_t>::max())));
          c.prefill_backend = str_arg(prefill_backend, op, "prefill_backend");
          c.decode_backend = str_arg(decode_backend, op, "decode_backend");
          c.block_size = int32(block_size, "block_size");
          c.max_query_tokens_per_request = int32(max_query_tokens_per_request, "max_query_tokens_per_request");
          if (!kv_sharing_target_layer_name.is_none()) {
            c.kv_sharing_target_layer_name = str_arg(kv_sharing_target_layer_name, op, "kv_sharing_target_layer_name");
          }
          c.batch_invariant = bool_arg(batch_invariant, op, "batch_invariant");
          c.index_topk = int32(index_topk, "index_topk");
          c.index_n_heads = int32(index_n_heads, "index_n_heads");
          c.index_head_dim = int32(index_head_dim, "index_head_dim");
          c.sparse_backend = str_arg(sparse_backend, op, "sparse_backend");
          c.indexer_backend = str_arg(indexer_backend, op, "indexer_backend");
          return PyMlaAttention{std::make_shared<MlaAttention>(c)};
        }),
        py::arg("num_heads"), py::arg("kv_lora_rank"), py::arg("qk_nope_head_dim"), py::arg("qk_rope_head_dim"),
        py::arg("v_head_dim"), py::arg("scale") = 0.0, py::arg("dtype") = "bf16", py::arg("kv_cache_dtype") = "bf16",
        py::arg("device") = "cpu", py::arg("prefill_backend") = "", py::arg("decode_backend") = "",
        py::arg("block_size") = 16, py::arg("max_query_tokens_per_request") = 1,
        py::arg("kv_sharing_target_layer_name") = py::none(), py::arg("stream") = py::none(),
        py::arg("batch_invariant") = false, py::arg("index_topk") = 0, py::arg("index_n_heads") = 64,
        py::arg("index_head_dim") = 128, py::arg("sparse_backend") = "", py::arg("indexer_backend") = "",
        "__init__(self: MlaAttention, num_heads: int, kv_lora_rank: int, qk_nope_head_dim: int, "
        "qk_rope_head_dim: int, v_head_dim: int, scale: float = 0.0, dtype: Any = 'bf16', "
        "kv_cache_dtype: Any = 'bf16', device: Any = 'cpu', prefill_backend: str = '', decode_backend: str = '', "
        "block_size: int = 16, max_query_tokens_per_request: int = 1, "
        "kv_sharing_target_layer_name: str | None = None, stream: int | None = None, batch_invariant: bool = False, "
        "index_topk: int = 0, index_n_heads: int = 64, index_head_dim: int = 128, sparse_backend: str = '', "
        "indexer_backend: str = '') -> None\n\n"
        "index_topk > 0: a sparse layer (DeepSeek-V3.2, docs/sparse.md): forward then takes indexer_q "
        "[T, H, D], indexer_k [T, D], indexer_weights [T, H] float32 and indexer_cache, and kv_cache_dtype may be "
        "'fp8_ds_mla'. "
        "scale 0 = 1/sqrt(P+R) (pass MlaDims.deepseek_v3(n).softmax_scale or from_dims for a model's own scale); "
        "backends '' = the selector's choice; stream: a cudaStream_t as an int (None: the default stream); "
        "batch_invariant: a request's output bits do not depend on its batch (docs/mla.md; build the metadata "
        "with batch_invariant=True too).");
  }
  cls.def(
         "process_weights_after_loading",
         [](PyMlaAttention& a, py::object weight) {
           ArrayArgs args("process_weights_after_loading", py::none());
           const Tensor w = args.get(weight, "kv_b_proj_weight");
           py::gil_scoped_release release;
           a.layer->process_weights_after_loading(w);
         },
         py::arg("kv_b_proj_weight"),
         "Loads kv_b_proj's weight (out, in) = [N*(P+V), L] and splits it into W_UK_T [N, P, L], W_UV [N, L, V].")
      .def(
          "load_kv_b_proj",
          [](PyMlaAttention& a, py::object weight) {
            ArrayArgs args("load_kv_b_proj", py::none());
            const Tensor w = args.get(weight, "kv_b_proj_weight");
            py::gil_scoped_release release;
            a.layer->process_weights_after_loading(w);
          },
          py::arg("kv_b_proj_weight"), "The same as process_weights_after_loading.")
      // Views own the weights they show: a later process_weights_after_loading
      // allocates new storage and leaves these valid.
      .def_property_readonly("W_UK_T",
                             [](const PyMlaAttention& a) {
                               const Tensor view = a.layer->W_UK_T();
                               return PyTensor{view, std::const_pointer_cast<void>(a.layer->weights_owner())};
                             })
      .def_property_readonly("W_UV",
                             [](const PyMlaAttention& a) {
                               const Tensor view = a.layer->W_UV();
                               return PyTensor{view, std::const_pointer_cast<void>(a.layer->weights_owner())};
                             })
      .def_property_readonly("prefill_backend",
                             [](const PyMlaAttention& a) { return a.layer->prefill_backend().name(); })
      .def_property_readonly("decode_backend", [](const PyMlaAttention& a) { return a.layer->decode_backend().name(); })
      .def_property_readonly(
          "sparse_backend",
          [](const PyMlaAttention& a) -> py::object {
            const SparseMlaBackendClass* s = a.layer->sparse_backend();
            return s ? py::object(py::str(s->name())) : py::object(py::none());
          },
          "The sparse backend's name for a sparse layer (index_topk > 0), else None.")
      .def_property_readonly(
          "scale", [](const PyMlaAttention& a) { return a.layer->config().scale; },
          "The softmax scale in use (0 at construction resolves to the dims' softmax_scale).")
      .def_property_readonly("dims", [](const PyMlaAttention& a) { return a.layer->config().dims; })
      .def_property_readonly(
          "kernels",
          [](const PyMlaAttention& a) {
            py::dict d;
            if (const SparseMlaBackendClass* s = a.layer->sparse_backend()) {
              d["sparse"] = s->name();
              return d;
            }
            d["prefill"] = a.layer->prefill_backend().kernel_label();
            d["decode"] = a.layer->decode_backend().kernel_label();
            return d;
          },
          "What runs, in words: {'prefill': ..., 'decode': ...}: the cpu backend's ISA path and "
          "GEMM; a CUDA backend's kernel, tiles and (decode, after a forward) split-KV parts; "
          "{'sparse': name} for a sparse layer.")
      .def_property_readonly("workspace_bytes", [](const PyMlaAttention& a) { return a.layer->workspace_bytes(); })
      .def(
          "set_dcp",
          [](PyMlaAttention& a, py::handle comm, int interleave, const std::string& method) {
            const BindingUse use(*a.in_use);
            if (comm.is_none()) {
              a.layer->set_dcp(nullptr);
              a.dcp_comm.reset();
              return;
            }
            const PyCommunicator& c = class_arg<PyCommunicator>(comm, "set_dcp", "comm", "Communicator");
            a.layer->set_dcp(c.comm.get(), interleave, dcp_method_arg(method));
            a.dcp_comm = c.comm;
          },
          py::arg("comm"), py::arg("interleave") = 1, py::arg("method") = "all_gather_reduce_scatter",
          "Decode context parallelism (docs/dcp.md): this layer becomes rank comm.rank of comm's group; decode "
          "then takes a DcpDecodePlan (build_dcp_decode_metadata with dcp_config) as forward's metadata. None "
          "switches it off.")
      .def_property_readonly("dcp_config", [](const PyMlaAttention& a) { return a.layer->dcp_config(); })
      .def(
          "forward",
          [](PyMlaAttention& a, py::object q, py::object kv_c_normed, py::object k_pe, py::handle cache_obj,
             py::handle metadata, py::object out, py::object output_scale, py::object stream, py::object indexer_q,
             py::object indexer_k, py::object indexer_weights, py::object indexer_cache) {
            const PyLatentCache& cache = class_arg<PyLatentCache>(cache_obj, "forward", "cache", "LatentCache");
            // A DcpDecodePlan (set_dcp) or an MlaMetadata.
            const DcpDecodePlan* plan = py::isinstance<PyDcpDecodePlan>(metadata)
                                            ? metadata.cast<const PyDcpDecodePlan&>().plan.get()
                                            : nullptr;
            const MlaMetadata& md =
                plan ? plan->metadata
                     : *class_arg<PyMlaMetadata>(metadata, "forward", "metadata", "MlaMetadata or lattn.DcpDecodePlan")
                            .md;
            if (cache.read_only && md.num_actual_tokens > 0) throw_read_only("forward", "cache");
            ArrayArgs args("forward", stream);
            const Tensor tq = args.get(q, "q"), tkv = args.get(kv_c_normed, "kv_c_normed"),
                         tpe = args.get(k_pe, "k_pe"), tscale = args.get_optional(output_scale, "output_scale");
            args.note(cache.source);
            const MlaAttentionConfig& c = a.layer->config();
            if (out.is_none()) {
              out = empty_like_framework(q, {tq.size(0), int64_t(c.dims.num_heads) * c.dims.v_head_dim},
                                         tscale.defined() ? DType::fp8_e4m3 : tq.dtype(), tq.device());
            }
            const Tensor tout = args.get_writable(out, "out");
            const bool sparse = !indexer_cache.is_none();
            IndexerInputs indexer;
            if (sparse) {
              indexer.cache =
                  &class_arg<PyIndexerKeyCache>(indexer_cache, "forward", "indexer_cache", "IndexerKeyCache").cache;
              indexer.q = args.get(indexer_q, "indexer_q");
              indexer.k = args.get(indexer_k, "indexer_k");
              indexer.weights = args.get(indexer_weights, "indexer_weights");
            }
            const BindingUse use(*a.in_use);
            a.layer->set_stream(args.stream());
            {
              py::gil_scoped_release release;
              if (sparse) {
                if (tscale.defined()) {
                  throw NotImplementedError("fused output quantization is not yet supported for MLAImplBase");
                }
                a.layer->forward(tq, tkv, tpe, cache.cache, md, indexer, tout);
              } else if (plan) {
                a.layer->forward(tq, tkv, tpe, cache.cache, *plan, tout, tscale);
              } else {
                a.layer->forward(tq, tkv, tpe, cache.cache, md, tout, tscale);
              }
            }
            return out;
          },
          py::arg("q"), py::arg("kv_c_normed"), py::arg("k_pe"), py::arg("cache"), py::arg("metadata"),
          py::arg("out") = py::none(), py::arg("output_scale") = py::none(), py::arg("stream") = py::none(),
          py::arg("indexer_q") = py::none(), py::arg("indexer_k") = py::none(), py::arg("indexer_weights") = py::none(),
          py::arg("indexer_cache") = py::none(),
          "q [T, N, P+R] or [T, N*(P+R)], kv_c_normed [T, L], k_pe [T, R] or [T, 1, R]; writes the cache, returns "
          "out [T, N*V] (a new array of q's framework unless out is given). A sparse layer (index_topk > 0) also takes "
          "indexer_q [T, H, D], indexer_k [T, D], indexer_weights [T, H] float32 and indexer_cache (an "
          "IndexerKeyCache with the latent cache's blocks); it writes the indexer keys too.");
}

}  // namespace lattn::python
