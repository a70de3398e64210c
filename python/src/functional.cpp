// Kernel-level calls with LSE (lattn/functional.h): mla_decode_plan /
// mla_decode over a paged latent cache (combined [.., L+R] or FlashInfer's
// ckv + kpe), and varlen mla_prefill, on any backend.
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "arrays.h"
#include "bind.h"
#include "cache_ops.h"
#include "convert.h"
#include "lattn/check.h"
#include "lattn/cpu.h"
#include "lattn/errors.h"
#include "lattn/functional.h"
#include "lattn/kernel_label.h"
#include "lattn/selector.h"
#include "mla_metadata.h"

namespace lattn::python {
namespace {

struct PyDecodePlan {
  std::shared_ptr<DecodePlan> plan;
  py::object metadata;  // the MlaMetadata a plan was made from (None otherwise)
};

Device device_or(py::handle device, const Tensor& like) {
  return device.is_none() ? like.device() : device_arg(device);
}

// (out, lse) or out.
py::object result(py::object out, py::object lse, bool return_lse) {
  if (return_lse) return py::make_tuple(std::move(out), std::move(lse));
  return out;
}

py::object decode(py::object q_absorbed, py::object cache, py::object plan_or_metadata, py::handle scale_obj,
                  py::object out, py::handle return_lse_obj, py::object lse, py::object stream,
                  py::handle backend_obj) {
  constexpr const char* op = "mla_decode";
  // Scalars first, each named when wrong (never pybind11's signature dump).
  const float scale = float(float_arg(scale_obj, op, "scale"));
  const bool return_lse = bool_arg(return_lse_obj, op, "return_lse");
  const std::string backend = str_arg(backend_obj, op, "backend");
  ArrayArgs args(op, stream);
  // q: the absorbed query [T, N, L+R], or its parts (ql_nope [T, N, L], q_pe [T, N, R]).
  Tensor q, ql_nope, q_pe;
  py::object q_like = q_absorbed;
  if (py::isinstance<py::tuple>(q_absorbed) || py::isinstance<py::list>(q_absorbed)) {
    py::sequence parts = q_absorbed.cast<py::sequence>();
    check_arg(py::len(parts) == 2, op, "q_absorbed", "an array [T, N, L+R] or a (ql_nope, q_pe) pair",
              "a sequence of " + std::to_string(py::len(parts)) + " items");
    q_like = parts[0];
    ql_nope = args.get(parts[0], "q_absorbed[0] (ql_nope)");
    q_pe = args.get(parts[1], "q_absorbed[1] (q_pe)");
    check_dim(op, "q_absorbed[0] (ql_nope)", ql_nope, 3);
    q = ql_nope;  // for the dims, dtype and device below
  } else {
    q = args.get(q_absorbed, "q_absorbed");
    check_dim(op, "q_absorbed", q, 3);
  }

  // The cache: a LatentCache, a (ckv, kpe) pair, or a [.., L+R] array (L+R
  // split as the plan says).
  std::optional<LatentCache> combined;
  Tensor ckv, kpe;
  if (py::isinstance<PyLatentCache>(cache)) {
    const auto& c = cache.cast<const PyLatentCache&>();
    args.note(c.source);
    combined = c.cache;
  } else if (py::isinstance<py::tuple>(cache) || py::isinstance<py::list>(cache)) {
    py::sequence parts = cache.cast<py::sequence>();
    check_arg(py::len(parts) == 2, op, "cache", "a LatentCache, a [blocks, page, L+R] array or a (ckv, kpe) pair",
              "a sequence of " + std::to_string(py::len(parts)) + " items");
    ckv = args.get(parts[0], "cache[0] (ckv)");
    kpe = args.get(parts[1], "cache[1] (kpe)");
    check_dim(op, "cache[0] (ckv)", ckv, 3);
    check_dim(op, "cache[1] (kpe)", kpe, 3);
  }

  // The plan: a DecodePlan, or an MlaMetadata planned by the caller (a plan
  // for this call is made from it: dims from q and the cache).
  std::shared_ptr<DecodePlan> plan;
  if (py::isinstance<PyDecodePlan>(plan_or_metadata)) {
    plan = plan_or_metadata.cast<const PyDecodePlan&>().plan;
  } else if (py::isinstance<PyMlaMetadata>(plan_or_metadata)) {
    const MlaMetadata& md = *plan_or_metadata.cast<const PyMlaMetadata&>().md;
    DecodePlanParams p;
    p.num_heads = int(q.size(1));
    if (combined) {
      p.kv_lora_rank = combined->kv_lora_rank;
      p.qk_rope_head_dim = combined->qk_rope_head_dim;
      p.kv_cache_dtype = combined->dtype();
    } else if (ckv.defined()) {
      p.kv_lora_rank = int(ckv.size(2));
      p.qk_rope_head_dim = int(kpe.size(2));
      p.kv_cache_dtype = ckv.dtype();
    } else {
      throw ValueError(
          "mla_decode: 'cache' must be a LatentCache or a (ckv, kpe) pair when planning from an "
          "MlaMetadata (a bare array does not say where L ends); got " +
          type_name(cache));
    }
    p.query_len = md.decode ? md.decode->max_decode_query_len : 1;
    p.dtype = q.dtype();
    p.device = q.device();
    p.stream = args.stream();
    p.backend = backend;
    plan = std::make_shared<DecodePlan>(p, md);
  } else {
    throw py::type_error(
        "mla_decode: 'plan_or_metadata' must be a lattn.DecodePlan (mla_decode_plan) or a "
        "lattn.MlaMetadata; got " +
        type_name(plan_or_metadata));
  }
  const DecodePlanParams& p = plan->params();
  if (!combined && !ckv.defined()) {
    const Tensor data = args.get(cache, "cache");
    combined = LatentCache{data, p.kv_lora_rank, p.qk_rope_head_dim, 1.0f};
  }
  const int64_t T = plan->num_tokens(), N = p.num_heads, L = p.kv_lora_rank;
  if (out.is_none()) out = empty_like_framework(q_like, {T, N, L}, q.dtype(), q.device());
  const Tensor tout = args.get_writable(out, "out");
  Tensor tlse;
  if (return_lse) {
    if (lse.is_none()) lse = empty_like_framework(q_like, {N, T}, DType::f32, q.device());
    tlse = args.get_writable(lse, "lse");
  } else {
    lse = py::none();
  }
  plan->set_stream(args.stream());
  {
    py::gil_scoped_release release;
    if (q_pe.defined()) {
      // The split query needs a combined cache (or the two halves of one).
      const LatentCache c = combined ? *combined : latent_cache_from_parts(ckv, kpe);
      mla_decode(ql_nope, q_pe, c, *plan, scale, tout, tlse);
    } else if (combined) {
      mla_decode(q, *combined, *plan, scale, tout, tlse);
    } else {
      mla_decode(q, ckv, kpe, *plan, scale, tout, tlse);
    }
  }
  return result(out, lse, return_lse);
}

}  // namespace

void bind_functional(py::module_& m) {
  py::class_<PyDecodePlan>(m, "DecodePlan", R"doc(
One step's decode schedule (lattn.mla_decode_plan): the metadata of a
decode-only batch on the device and the decode backend that runs it; reuse it
for every layer of the step.)doc")
      .def_property_readonly(
          "backend", [](const PyDecodePlan& p) { return p.plan->backend_name(); },
          "The decode backend that runs (the selector's choice or the one named).")
      .def_property_readonly("num_requests", [](const PyDecodePlan& p) { return p.plan->num_requests(); })
      .def_property_readonly(
          "num_tokens", [](const PyDecodePlan& p) { return p.plan->num_tokens(); },
          "Rows of q_absorbed / out: num_requests * query_len.")
      .def_property_readonly("query_len", [](const PyDecodePlan& p) { return p.plan->params().query_len; })
      .def_property_readonly("block_size", [](const PyDecodePlan& p) { return p.plan->block_size(); })
      .def_property_readonly("num_heads", [](const PyDecodePlan& p) { return p.plan->params().num_heads; })
      .def_property_readonly("kv_lora_rank", [](const PyDecodePlan& p) { return p.plan->params().kv_lora_rank; })
      .def_property_readonly("qk_rope_head_dim",
                             [](const PyDecodePlan& p) { return p.plan->params().qk_rope_head_dim; })
      .def_property_readonly("device", [](const PyDecodePlan& p) { return device_name(p.plan->params().device); })
      .def_property_readonly("dtype",
                             [](const PyDecodePlan& p) { return std::string(dtype_name(p.plan->params().dtype)); })
      .def_property_readonly(
          "kv_cache_dtype",
          [](const PyDecodePlan& p) { return std::string(dtype_name(p.plan->params().kv_cache_dtype)); })
      .def("__repr__", [](const PyDecodePlan& p) {
        const DecodePlanParams& q = p.plan->params();
        return "DecodePlan(num_requests=" + std::to_string(p.plan->num_requests()) +
               ", query_len=" + std::to_string(q.query_len) + ", num_heads=" + std::to_string(q.num_heads) +
               ", backend='" + p.plan->backend_name() + "', device=" + device_name(q.device) + ")";
      });

  m.def(
      "mla_decode_plan",
      [](py::object block_table, py::object cache_seqlens, py::handle block_size_obj, py::handle num_heads,
         py::handle kv_lora_rank, py::handle qk_rope_head_dim, py::handle query_len, py::handle dtype,
         py::handle kv_cache_dtype, py::handle device, py::handle backend, py::handle num_threads, py::object stream) {
        constexpr const char* op = "mla_decode_plan";
        constexpr int64_t kIntMax = std::numeric_limits<int>::max();
        const int block_size = int(int_arg(block_size_obj, op, "block_size", 1, kIntMax));
        ArrayArgs args(op, stream);
        const Tensor table = args.get(block_table, "block_table");
        const Tensor lens = args.get(cache_seqlens, "cache_seqlens");
        DecodePlanParams p;
        p.num_heads = int(int_arg(num_heads, op, "num_heads", 1, kIntMax));
        p.kv_lora_rank = int(int_arg(kv_lora_rank, op, "kv_lora_rank", 1, kIntMax));
        p.qk_rope_head_dim = int(int_arg(qk_rope_head_dim, op, "qk_rope_head_dim", 0, kIntMax));
        p.query_len = int(int_arg(query_len, op, "query_len", 1, kIntMax));
        p.dtype = dtype_arg(dtype);
        p.kv_cache_dtype = kv_cache_dtype.is_none() ? p.dtype : dtype_arg(kv_cache_dtype);
        p.device = device_or(device, table);
        p.stream = args.stream();
        p.backend = str_arg(backend, op, "backend");
        p.num_threads = int(int_arg(num_threads, op, "num_threads", 0, kIntMax));
        std::shared_ptr<DecodePlan> plan;
        {
          py::gil_scoped_release release;
          plan = std::make_shared<DecodePlan>(p, table, lens, block_size);
        }
        return PyDecodePlan{plan, py::none()};
      },
      py::arg("block_table"), py::arg("cache_seqlens"), py::arg("block_size"), py::arg("num_heads"), py::kw_only(),
      py::arg("kv_lora_rank") = 512, py::arg("qk_rope_head_dim") = 64, py::arg("query_len") = 1,
      py::arg("dtype") = "bf16", py::arg("kv_cache_dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("backend") = "", py::arg("num_threads") = 0, py::arg("stream") = py::none(),
      R"doc(Plans one step's decode: block_table [B, max_blocks] int32, cache_seqlens [B] int32
(cached tokens + query_len per request, FlashMLA's cache_seqlens). The plan
holds the metadata on `device` (default: block_table's) and the decode backend
(backend='' = the selector's choice; a registry name pins one).)doc");

  m.def("mla_decode", &decode, py::arg("q_absorbed"), py::arg("cache"), py::arg("plan_or_metadata"), py::arg("scale"),
        py::arg("out") = py::none(), py::arg("return_lse") = true, py::kw_only(), py::arg("lse") = py::none(),
        py::arg("stream") = py::none(), py::arg("backend") = "",
        R"doc(Absorbed MLA decode with LSE (FlashMLA's flash_mla_with_kvcache):
  q_absorbed [T, N, L+R]  [q_nope . W_UK_T | q_pe], T = plan.num_tokens, or the
             pair (ql_nope [T, N, L], q_pe [T, N, R])
  cache      LatentCache, a [num_blocks, block_size, L+R] array, or FlashInfer's
             (ckv [num_blocks, block_size, L], kpe [num_blocks, block_size, R])
  plan_or_metadata  a DecodePlan (mla_decode_plan) or an MlaMetadata with decode rows
  scale      the softmax scale (e.g. MlaDims.deepseek_v3().softmax_scale)
Returns (out [T, N, L], lse [N, T] float32) or out when return_lse=False.
backend applies when planning from an MlaMetadata.)doc");

  m.def(
      "mla_prefill",
      [](py::object q, py::object k, py::object v, py::object cu_seqlens_q, py::object cu_seqlens_k,
         py::handle causal_obj, py::handle scale_obj, py::handle return_lse_obj, py::object out, py::object lse,
         py::handle backend, py::handle qk_rope_head_dim, py::handle kv_lora_rank, py::handle num_threads,
         py::object stream) {
        constexpr const char* op = "mla_prefill";
        constexpr int64_t kIntMax = std::numeric_limits<int>::max();
        const bool causal = bool_arg(causal_obj, op, "causal");
        const float scale = float(float_arg(scale_obj, op, "scale"));
        const bool return_lse = bool_arg(return_lse_obj, op, "return_lse");
        ArrayArgs args(op, stream);
        const Tensor tq = args.get(q, "q"), tk = args.get(k, "k"), tv = args.get(v, "v");
        const Tensor cq = args.get(cu_seqlens_q, "cu_seqlens_q"), ck = args.get(cu_seqlens_k, "cu_seqlens_k");
        check_dim(op, "q", tq, 3);
        check_dim(op, "v", tv, 3);
        if (out.is_none()) out = empty_like_framework(q, {tq.size(0), tq.size(1), tv.size(2)}, tq.dtype(), tq.device());
        const Tensor tout = args.get_writable(out, "out");
        Tensor tlse;
        if (return_lse) {
          if (lse.is_none()) lse = empty_like_framework(q, {tq.size(1), tq.size(0)}, DType::f32, tq.device());
          tlse = args.get_writable(lse, "lse");
        } else {
          lse = py::none();
        }
        PrefillCallParams p;
        p.device = tq.device();
        p.stream = args.stream();
        p.backend = str_arg(backend, op, "backend");
        p.qk_rope_head_dim = int(int_arg(qk_rope_head_dim, op, "qk_rope_head_dim", 0, kIntMax));
        p.kv_lora_rank = int(int_arg(kv_lora_rank, op, "kv_lora_rank", 1, kIntMax));
        p.num_threads = int(int_arg(num_threads, op, "num_threads", 0, kIntMax));
        {
          py::gil_scoped_release release;
          mla_prefill(tq, tk, tv, cq, ck, causal, scale, tout, tlse, p);
        }
        return result(out, lse, return_lse);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("cu_seqlens_q"), py::arg("cu_seqlens_k"), py::arg("causal"),
      py::arg("scale"), py::arg("return_lse") = true, py::kw_only(), py::arg("out") = py::none(),
      py::arg("lse") = py::none(), py::arg("backend") = "", py::arg("qk_rope_head_dim") = 0,
      py::arg("kv_lora_rank") = 512, py::arg("num_threads") = 0, py::arg("stream") = py::none(),
      R"doc(Varlen MLA prefill attention with LSE (FlashAttention's varlen convention):
  q [Tq, N, Dqk], k [Tk, N, Dqk], v [Tk, N, V]; cu_seqlens_q / cu_seqlens_k [B+1] int32
  causal=True: queries and keys are the same tokens (cu_seqlens_k == cu_seqlens_q);
  causal=False: every query of a sequence sees all of its keys.
Returns (out [Tq, N, V], lse [N, Tq] float32) or out. backend='' = the selector's
choice; qk_rope_head_dim=0 means Dqk // 3 (DeepSeek: 192 = 128 + 64).)doc");

  m.def(
      "cpu_isa", [] { return std::string(cpu_isa_name(cpu_isa())); },
      "The instruction-set path the cpu backend runs: LATTN_CPU_ISA when set (ValueError when it names an "
      "unknown path or one this CPU cannot run), else the best this CPU supports.");
  m.def(
      "cpu_kernel_label", [](py::handle dtype) { return cpu_kernel_label(dtype_arg(dtype)); },
      py::arg("dtype") = "bf16", "The cpu backend's kernels in words (ISA path and why, projection GEMM).");
  m.def(
      "backend_kernel_label",
      [](const std::string& backend, py::handle device, py::handle dtype) {
        return backend_kernel_label(backend, device_arg(device), dtype_arg(dtype));
      },
      py::arg("backend"), py::arg("device") = "cpu", py::arg("dtype") = "bf16",
      "A backend's kernels in words (the cpu backend's ISA and GEMM; the reference's loops).");

  m.def(
      "mla_prefill_backend_for",
      [](py::handle dtype, py::handle qk_head_dim_obj, py::handle v_head_dim_obj, py::handle qk_rope_head_dim_obj,
         py::handle device, py::handle backend) {
        constexpr const char* op = "mla_prefill_backend_for";
        constexpr int64_t kIntMax = std::numeric_limits<int>::max();
        const int qk_head_dim = int(int_arg(qk_head_dim_obj, op, "qk_head_dim", 1, kIntMax));
        const int v_head_dim = int(int_arg(v_head_dim_obj, op, "v_head_dim", 1, kIntMax));
        const int qk_rope_head_dim = int(int_arg(qk_rope_head_dim_obj, op, "qk_rope_head_dim", 0, kIntMax));
        SelectorConfig s;
        s.dtype = dtype_arg(dtype);
        s.device = device_arg(device);
        const int R = qk_rope_head_dim > 0 ? qk_rope_head_dim : qk_head_dim / 3;
        s.mla_dimensions = MLADimensions{qk_head_dim - R, R, v_head_dim};
        s.is_r1_compatible = is_deepseek_r1_mla_compatible(s.mla_dimensions);
        s.prefill_backend = str_arg(backend, op, "backend");
        return get_mla_prefill_backend(s)->name();
      },
      py::arg("dtype"), py::arg("qk_head_dim"), py::arg("v_head_dim"), py::kw_only(), py::arg("qk_rope_head_dim") = 0,
      py::arg("device") = "cpu", py::arg("backend") = "",
      "The prefill backend mla_prefill would run for these dims (the selector's choice, or the one named).");
}

}  // namespace lattn::python
