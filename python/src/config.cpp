// MLA dimensions, the selector config and the quantization key.
#include <limits>
#include <optional>
#include <string>

#include "bind.h"
#include "convert.h"
#include "lattn/backend.h"
#include "lattn/config.h"
#include "lattn/errors.h"

namespace lattn::python {

QuantKey quant_key_arg(const std::string& name) {
  if (name == "fp8_e4m3_static_per_tensor") return QuantKey::fp8_e4m3_static_per_tensor;
  throw ValueError("unknown quant key '" + name + "'; expected fp8_e4m3_static_per_tensor");
}

void bind_config(py::module_& m) {
  m.def("yarn_mscale", &yarn_mscale, py::arg("factor"), py::arg("mscale_all_dim"),
        "YaRN's attention temperature: 0.1 * mscale_all_dim * ln(factor) + 1 (1 when factor <= 1).");
  m.def("mla_softmax_scale", &mla_softmax_scale, py::arg("qk_head_dim"), py::arg("yarn_factor") = 1.0,
        py::arg("yarn_mscale_all_dim") = 0.0,
        "The softmax scale of an MLA model: qk_head_dim ** -0.5 * yarn_mscale(factor, mscale_all_dim) ** 2 "
        "(DeepSeek-V3: mla_softmax_scale(192, 40, 1.0) = 0.1352).");

  py::class_<MlaDims>(m, "MlaDims", R"doc(
One MLA layer's dimensions: N heads, L, P, R, V (seed 002's notation), and the
model's softmax scale as a factor over 1/sqrt(P+R) (YaRN's mscale**2 for
DeepSeek, 1 otherwise): dims.softmax_scale is the scale q.k is multiplied by.
  MlaDims.deepseek_v3(16).softmax_scale   # 0.1352 = 192**-0.5 * (0.1*ln 40 + 1)**2)doc")
      .def(py::init([](py::handle num_heads, py::handle kv_lora_rank, py::handle qk_nope_head_dim,
                       py::handle qk_rope_head_dim, py::handle v_head_dim, py::handle softmax_scale_factor) {
             // Types and int ranges checked by name here; the values' meaning by validate().
             constexpr const char* op = "MlaDims";
             constexpr int64_t kLo = std::numeric_limits<int>::min(), kHi = std::numeric_limits<int>::max();
             MlaDims d{int(int_arg(num_heads, op, "num_heads", kLo, kHi)),
                       int(int_arg(kv_lora_rank, op, "kv_lora_rank", kLo, kHi)),
                       int(int_arg(qk_nope_head_dim, op, "qk_nope_head_dim", kLo, kHi)),
                       int(int_arg(qk_rope_head_dim, op, "qk_rope_head_dim", kLo, kHi)),
                       int(int_arg(v_head_dim, op, "v_head_dim", kLo, kHi)),
                       float(float_arg(softmax_scale_factor, op, "softmax_scale_factor", false))};
             d.validate();
             return d;
           }),
           py::arg("num_heads"), py::arg("kv_lora_rank"), py::arg("qk_nope_head_dim"), py::arg("qk_rope_head_dim"),
           py::arg("v_head_dim"), py::arg("softmax_scale_factor") = 1.0f)
      .def_readonly("num_heads", &MlaDims::num_heads)
      .def_readonly("kv_lora_rank", &MlaDims::kv_lora_rank)
      .def_readonly("qk_nope_head_dim", &MlaDims::qk_nope_head_dim)
      .def_readonly("qk_rope_head_dim", &MlaDims::qk_rope_head_dim)
      .def_readonly("v_head_dim", &MlaDims::v_head_dim)
      .def_readonly("softmax_scale_factor", &MlaDims::softmax_scale_factor)
      .def_property_readonly("softmax_scale", &MlaDims::softmax_scale,
                             "softmax_scale_factor / sqrt(P+R): the scale MlaAttention uses when given scale=0.")
      .def_property_readonly("qk_head_dim", &MlaDims::qk_head_dim)
      .def_property_readonly("cache_entry_dim", &MlaDims::cache_entry_dim)
      .def_static("deepseek_v3", &MlaDims::deepseek_v3, py::arg("num_heads") = 128,
                  "DeepSeek-V3/R1: L=512 P=128 R=64 V=128, YaRN factor 40, mscale_all_dim 1.0.")
      .def_static("deepseek_v2", &MlaDims::deepseek_v2, py::arg("num_heads") = 128,
                  "DeepSeek-V2 (and V2-Lite, 16 heads): the V3 dims, YaRN factor 40, mscale_all_dim 0.707.")
      .def_static("minicpm3", &MlaDims::minicpm3, py::arg("num_heads") = 40,
                  "MiniCPM3-4B: L=256 P=64 R=32 V=64, scale 1/sqrt(P+R).")
      .def("__eq__", [](const MlaDims& a, const MlaDims& b) { return a == b; })
      .def("__repr__", [](const MlaDims& d) {
        return "MlaDims(" + d.str() +
               (d.softmax_scale_factor == 1.0f ? ""
                                               : " softmax_scale_factor=" + std::to_string(d.softmax_scale_factor)) +
               ")";
      });

  py::class_<MLADimensions>(m, "MLADimensions", "The seeds' MLADimensions (per-head dims a prefill backend checks).")
      .def(py::init([](int nope, int rope, int v) {
             return MLADimensions{nope, rope, v};
           }),
           py::arg("qk_nope_head_dim"), py::arg("qk_rope_head_dim"), py::arg("v_head_dim"))
      .def_readonly("qk_nope_head_dim", &MLADimensions::qk_nope_head_dim)
      .def_readonly("qk_rope_head_dim", &MLADimensions::qk_rope_head_dim)
      .def_readonly("v_head_dim", &MLADimensions::v_head_dim)
      .def("__eq__", [](const MLADimensions& a, const MLADimensions& b) { return a == b; })
      .def("__hash__",
           [](const MLADimensions& d) {
             return py::hash(py::make_tuple(d.qk_nope_head_dim, d.qk_rope_head_dim, d.v_head_dim));
           })
      .def("__str__", &MLADimensions::str)
      .def("__repr__", [](const MLADimensions& d) { return "MLADimensions" + d.str(); });
  m.attr("DEEPSEEK_R1_MLA_DIMENSIONS") = kDeepSeekR1MlaDimensions;
  m.def("is_deepseek_r1_mla_compatible", &is_deepseek_r1_mla_compatible, py::arg("dims"));

  py::class_<SelectorConfig>(m, "SelectorConfig", R"doc(
What the selector knows about a layer (the seeds' MLAPrefillSelectorConfig,
with the decode-side facts). is_r1_compatible defaults to
mla_dimensions == (128, 64, 128).)doc")
      .def(
          py::init([](py::handle dtype, std::optional<MLADimensions> dims, std::optional<bool> is_r1, py::handle device,
                      int num_heads, int kv_lora_rank, int qk_rope_head_dim, py::handle kv_cache_dtype, int block_size,
                      int max_query_tokens_per_request, std::string prefill_backend, std::string decode_backend) {
            SelectorConfig c;
            c.dtype = dtype_arg(dtype);
            c.mla_dimensions = dims.value_or(MLADimensions{});
            c.is_r1_compatible = is_r1.value_or(is_deepseek_r1_mla_compatible(c.mla_dimensions));
            c.device = device_arg(device);
            c.num_heads = num_heads;
            c.kv_lora_rank = kv_lora_rank;
            c.qk_rope_head_dim = qk_rope_head_dim;
            c.kv_cache_dtype = dtype_arg(kv_cache_dtype);
            c.block_size = block_size;
            c.max_query_tokens_per_request = max_query_tokens_per_request;
            c.prefill_backend = std::move(prefill_backend);
            c.decode_backend = std::move(decode_backend);
            return c;
          }),
          py::arg("dtype") = "bf16", py::arg("mla_dimensions") = py::none(), py::arg("is_r1_compatible") = py::none(),
          py::arg("device") = "cpu", py::arg("num_heads") = 0, py::arg("kv_lora_rank") = 0,
          py::arg("qk_rope_head_dim") = 0, py::arg("kv_cache_dtype") = "bf16", py::arg("block_size") = 16,
          py::arg("max_query_tokens_per_request") = 1, py::arg("prefill_backend") = "", py::arg("decode_backend") = "")
      .def_static(
          "for_dims",
          [](const MlaDims& dims, py::handle dtype, py::handle kv_cache_dtype, py::handle device, int block_size,
             int max_query_tokens_per_request) {
            return SelectorConfig::for_dims(dims, dtype_arg(dtype), dtype_arg(kv_cache_dtype), device_arg(device),
                                            block_size, max_query_tokens_per_request);
          },
          py::arg("dims"), py::arg("dtype") = "bf16", py::arg("kv_cache_dtype") = "bf16", py::arg("device") = "cpu",
          py::arg("block_size") = 16, py::arg("max_query_tokens_per_request") = 1)
      .def_property_readonly("dtype", [](const SelectorConfig& c) { return std::string(dtype_name(c.dtype)); })
      .def_readonly("mla_dimensions", &SelectorConfig::mla_dimensions)
      .def_readonly("is_r1_compatible", &SelectorConfig::is_r1_compatible)
      .def_property_readonly("device", [](const SelectorConfig& c) { return device_name(c.device); })
      .def_readonly("num_heads", &SelectorConfig::num_heads)
      .def_readonly("kv_lora_rank", &SelectorConfig::kv_lora_rank)
      .def_readonly("qk_rope_head_dim", &SelectorConfig::qk_rope_head_dim)
      .def_property_readonly("kv_cache_dtype",
                             [](const SelectorConfig& c) { return std::string(dtype_name(c.kv_cache_dtype)); })
      .def_readonly("block_size", &SelectorConfig::block_size)
      .def_readonly("max_query_tokens_per_request", &SelectorConfig::max_query_tokens_per_request)
      .def_readwrite("prefill_backend", &SelectorConfig::prefill_backend,
                     "Explicit prefill backend name; '' = LATTN_MLA_PREFILL_BACKEND, else automatic.")
      .def_readwrite("decode_backend", &SelectorConfig::decode_backend)
      .def("decode_repr", &SelectorConfig::decode_repr)
      .def("__eq__", [](const SelectorConfig& a, const SelectorConfig& b) { return a == b; })
      .def("__repr__", &SelectorConfig::repr);
}

}  // namespace lattn::python
