// The paged latent cache and its ops (lattn/cache.h, lattn/ops.h), with the
// seeds' names: concat_and_cache_mla, gather_cache, merge_attn_states,
// copy_blocks (the seeds' copy_blocks_mla), swap_blocks.
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "bind.h"
#include "cache_ops.h"
#include "convert.h"
#include "lattn/cache.h"
#include "lattn/ops.h"

namespace lattn::python {

const PyLatentCache& cache_arg(py::handle obj, const char* op, const char* arg, bool writable) {
  const PyLatentCache& c = class_arg<PyLatentCache>(obj, op, arg, "LatentCache");
  if (writable && c.read_only) throw_read_only(op, arg);
  return c;
}

void bind_cache_ops(py::module_& m) {
  py::class_<PyLatentCache>(m, "LatentCache", R"doc(
One layer's paged latent KV cache: data [num_blocks, block_size, L + R]
(entries [kv_c | k_pe]) of f16, bf16 or fp8_e4m3 (stored = fp8(x / scale)).
LatentCache(data, ...) views any DLPack array (torch.uint8 or
torch.float8_e4m3fn memory for fp8 is read as fp8_e4m3 when dtype='fp8_e4m3');
LatentCache.empty(...) allocates one.)doc")
      .def(py::init([](py::object data, py::handle kv_lora_rank, py::handle qk_rope_head_dim, py::handle scale_obj,
                       py::object dtype) {
             const float scale = float(float_arg(scale_obj, "LatentCache", "scale", false));  // validate() judges it
             constexpr int64_t kIntMax = std::numeric_limits<int>::max();
             const int L = int(int_arg(kv_lora_rank, "LatentCache", "kv_lora_rank", 1, kIntMax));
             const int R = int(int_arg(qk_rope_head_dim, "LatentCache", "qk_rope_head_dim", 1, kIntMax));
             ArrayArgs args("LatentCache", py::none());
             PyTensor t = args.get_with_owner(data, "data");
             if (!dtype.is_none()) t.view = t.view.reinterpret(dtype_arg(dtype));
             PyLatentCache c{LatentCache{t.view, L, R, scale}, t.owner, data, t.read_only};
             c.cache.validate("LatentCache");
             return c;
           }),
           py::arg("data"), py::arg("kv_lora_rank"), py::arg("qk_rope_head_dim"), py::arg("scale") = 1.0f,
           py::arg("dtype") = py::none(),
           "dtype: read the memory as this dtype of the same size (e.g. 'fp8_e4m3' for uint8 memory).")
      .def_static(
          "empty",
          [](py::handle num_blocks, py::handle block_size, py::handle kv_lora_rank, py::handle qk_rope_head_dim,
             py::handle dtype, py::handle device, py::handle scale_obj) {
            constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
            constexpr int64_t kIntMax = std::numeric_limits<int>::max();
            const char* op = "LatentCache.empty";
            const float scale = float(float_arg(scale_obj, op, "scale", false));
            const MlaDims dims{1, int(int_arg(kv_lora_rank, op, "kv_lora_rank", 1, kIntMax)), 1,
                               int(int_arg(qk_rope_head_dim, op, "qk_rope_head_dim", 1, kIntMax)), 1};
            auto owned = std::make_shared<OwnedLatentCache>(int_arg(num_blocks, op, "num_blocks", 0, kMax),
                                                            int_arg(block_size, op, "block_size", 1, kMax), dims,
                                                            dtype_arg(dtype), device_arg(device), scale);
            return PyLatentCache{owned->cache(), owned, py::none()};
          },
          py::arg("num_blocks"), py::arg("block_size"), py::arg("kv_lora_rank"), py::arg("qk_rope_head_dim"),
          py::arg("dtype") = "bf16", py::arg("device") = "cpu", py::arg("scale") = 1.0f)
      .def_property_readonly("data",
                             [](const PyLatentCache& c) {
                               return PyTensor{c.cache.data, c.owner};
                             })
      .def_property_readonly("num_blocks", [](const PyLatentCache& c) { return c.cache.num_blocks(); })
      .def_property_readonly("block_size", [](const PyLatentCache& c) { return c.cache.block_size(); })
      .def_property_readonly("kv_lora_rank", [](const PyLatentCache& c) { return c.cache.kv_lora_rank; })
      .def_property_readonly("qk_rope_head_dim", [](const PyLatentCache& c) { return c.cache.qk_rope_head_dim; })
      .def_property_readonly("scale", [](const PyLatentCache& c) { return c.cache.scale; })
      .def_property_readonly("dtype",
                             [](const PyLatentCache& c) {
                               return c.cache.is_fp8_ds_mla() ? std::string("fp8_ds_mla")
                                                              : std::string(dtype_name(c.cache.dtype()));
                             })
      .def_property_readonly("device", [](const PyLatentCache& c) { return device_name(c.cache.device()); })
      .def("__repr__", [](const PyLatentCache& c) { return "LatentCache(" + c.cache.data.describe() + ")"; });

  m.def(
      "get_kv_cache_shape",
      [](py::handle nb, py::handle bs, py::handle nkv, py::handle hs) {
        constexpr const char* op = "get_kv_cache_shape";
        constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
        const KvCacheShape s =
            get_kv_cache_shape(int_arg(nb, op, "num_blocks", kMin, kMax), int_arg(bs, op, "block_size", kMin, kMax),
                               int_arg(nkv, op, "num_kv_heads", kMin, kMax), int_arg(hs, op, "head_size", kMin, kMax));
        return py::make_tuple(s.num_blocks, s.block_size, s.head_size);
      },
      py::arg("num_blocks"), py::arg("block_size"), py::arg("num_kv_heads"), py::arg("head_size"),
      "(num_blocks, block_size, head_size): MLA caches one latent vector per token.");

  m.def(
      "concat_and_cache_mla",
      [](py::object kv_c, py::object k_pe, py::handle cache_obj, py::object slot_mapping, py::object stream) {
        const PyLatentCache& cache = cache_arg(cache_obj, "concat_and_cache_mla", "cache", true);
        ArrayArgs args("concat_and_cache_mla", stream);
        const Tensor tk = args.get(kv_c, "kv_c"), tp = args.get(k_pe, "k_pe"),
                     ts = args.get(slot_mapping, "slot_mapping");
        args.note(cache.source);
        py::gil_scoped_release release;
        concat_and_cache_mla(tk, tp, cache.cache, ts, args.stream());
      },
      py::arg("kv_c"), py::arg("k_pe"), py::arg("cache"), py::arg("slot_mapping"), py::arg("stream") = py::none(),
      "Writes token t's [kv_c[t] | k_pe[t]] to slot slot_mapping[t] (int64; -1 = skip). kv_c [T, L], k_pe [T, R] "
      "or [T, 1, R].");

  m.def(
      "gather_cache",
      [](py::handle cache_obj, py::object dst, py::object block_table, py::object cu_seq_lens,
         py::handle batch_size_obj, py::object seq_starts, py::object stream) {
        const PyLatentCache& cache = cache_arg(cache_obj, "gather_cache", "cache", false);
        const int batch_size =
            int(int_arg(batch_size_obj, "gather_cache", "batch_size", 0, std::numeric_limits<int>::max()));
        ArrayArgs args("gather_cache", stream);
        const Tensor td = args.get_writable(dst, "dst"), tb = args.get(block_table, "block_table"),
                     tc = args.get(cu_seq_lens, "cu_seq_lens"), tss = args.get_optional(seq_starts, "seq_starts");
        args.note(cache.source);
        py::gil_scoped_release release;
        gather_cache(cache.cache, td, tb, tc, batch_size, tss, args.stream());
      },
      py::arg("cache"), py::arg("dst"), py::arg("block_table"), py::arg("cu_seq_lens"), py::arg("batch_size"),
      py::arg("seq_starts") = py::none(), py::arg("stream") = py::none(),
      "Gathers request b's context tokens [seq_starts[b], ...) into dst rows [cu_seq_lens[b], cu_seq_lens[b+1]) "
      "(fp8 entries dequantized). block_table int32 [B, max_blocks], cu_seq_lens int32 [B+1], seq_starts int32 [B].");

  m.def(
      "merge_attn_states",
      [](py::object output, py::object prefix_output, py::object prefix_lse, py::object suffix_output,
         py::object suffix_lse, py::object output_lse, py::object stream) {
        ArrayArgs args("merge_attn_states", stream);
        const Tensor o = args.get_writable(output, "output"), po = args.get(prefix_output, "prefix_output"),
                     pl = args.get(prefix_lse, "prefix_lse"), so = args.get(suffix_output, "suffix_output"),
                     sl = args.get(suffix_lse, "suffix_lse"), ol = args.get_writable_optional(output_lse, "output_lse");
        py::gil_scoped_release release;
        merge_attn_states(o, ol, po, pl, so, sl, args.stream());
      },
      py::arg("output"), py::arg("prefix_output"), py::arg("prefix_lse"), py::arg("suffix_output"),
      py::arg("suffix_lse"), py::arg("output_lse") = py::none(), py::arg("stream") = py::none(),
      "vLLM's merge_attn_states: outputs [T, N, D], LSE [N, T] float32 natural log; +inf reads as -inf, both "
      "-inf give 0 and -inf.");

  m.def(
      "copy_blocks",
      [](py::handle caches, py::object block_mapping, py::object stream) {
        if (!py::isinstance<py::sequence>(caches)) {
          throw py::type_error("copy_blocks: argument 'caches' must be a list of lattn.LatentCache, got " +
                               type_name(caches));
        }
        ArrayArgs args("copy_blocks", stream);
        const Tensor map = args.get(block_mapping, "block_mapping");
        std::vector<LatentCache> views;
        for (py::handle item : caches) {
          const PyLatentCache& c = cache_arg(item, "copy_blocks", "caches", true);
          args.note(c.source);
          views.push_back(c.cache);
        }
        py::gil_scoped_release release;
        copy_blocks(views, map, args.stream());
      },
      py::arg("caches"), py::arg("block_mapping"), py::arg("stream") = py::none(),
      "The seeds' copy_blocks_mla: in every cache, block dst = block src for each row (src, dst) of block_mapping "
      "(int64 [n, 2], host).");

  m.def(
      "swap_blocks",
      [](py::handle src_obj, py::handle dst_obj, py::object block_mapping, py::object stream) {
        const PyLatentCache& src = cache_arg(src_obj, "swap_blocks", "src", false);
        const PyLatentCache& dst = cache_arg(dst_obj, "swap_blocks", "dst", true);
        ArrayArgs args("swap_blocks", stream);
        const Tensor map = args.get(block_mapping, "block_mapping");
        args.note(src.source);
        args.note(dst.source);
        py::gil_scoped_release release;
        swap_blocks(src.cache, dst.cache, map, args.stream());
      },
      py::arg("src"), py::arg("dst"), py::arg("block_mapping"), py::arg("stream") = py::none(),
      "Copies whole blocks src -> dst (host<->host, host<->device, device<->device), block_mapping int64 [n, 2] "
      "on the host.");
}

}  // namespace lattn::python
