// Sparse MLA (lattn/sparse.h) for Python: the fp8_ds_mla cache dtype (a
// LatentCache of dtype 'fp8_ds_mla'), sparse_mla, and the lightning indexer
// (IndexerKeyCache, indexer_k_cache_write, indexer_logits, indexer_topk).
#include <limits>
#include <memory>
#include <string>

#include "arrays.h"
#include "bind.h"
#include "cache_ops.h"
#include "convert.h"
#include "lattn/sparse.h"

namespace lattn::python {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

}  // namespace

void bind_sparse(py::module_& m) {
  m.attr("fp8_ds_mla") = "fp8_ds_mla";
  m.def(
      "fp8_ds_mla_entry_bytes",
      [](py::handle kv_lora_rank, py::handle qk_rope_head_dim) {
        constexpr const char* op = "fp8_ds_mla_entry_bytes";
        return fp8_ds_mla_entry_bytes(int(int_arg(kv_lora_rank, op, "kv_lora_rank", 1, kIntMax)),
                                      int(int_arg(qk_rope_head_dim, op, "qk_rope_head_dim", 1, kIntMax)));
      },
      py::arg("kv_lora_rank"), py::arg("qk_rope_head_dim"),
      "Bytes of one fp8_ds_mla cache entry: L fp8 values, one f32 scale per 128, 2 R of bf16 rope (656 for DeepSeek).");

  m.def(
      "sparse_mla",
      [](py::object q, py::handle cache_obj, py::object indices, py::handle scale, py::object attn_sink, py::object out,
         py::object lse, py::handle backend_obj, py::object stream) {
        constexpr const char* op = "sparse_mla";
        const PyLatentCache& cache = cache_arg(cache_obj, op, "cache", false);
        const std::string backend = str_arg(backend_obj, op, "backend");
        ArrayArgs args(op, stream);
        SparseMlaArgs a;
        a.q = args.get(q, "q");
        a.indices = args.get(indices, "indices");
        a.attn_sink = args.get_optional(attn_sink, "attn_sink");
        a.scale = float(float_arg(scale, op, "scale"));
        args.note(cache.source);
        const int64_t T = a.q.dim() == 3 ? a.q.size(0) : 0, N = a.q.dim() == 3 ? a.q.size(1) : 0;
        py::object out_obj =
            out.is_none() ? empty_like_framework(q, {T, N, cache.cache.kv_lora_rank}, a.q.dtype(), a.q.device()) : out;
        py::object lse_obj = lse.is_none() ? empty_like_framework(q, {N, T}, DType::f32, a.q.device()) : lse;
        a.out = args.get_writable(out_obj, "out");
        a.lse = args.get_writable(lse_obj, "lse");
        {
          py::gil_scoped_release release;
          sparse_mla(a, cache.cache, backend, args.stream());
        }
        return py::make_tuple(out_obj, lse_obj);
      },
      py::arg("q"), py::arg("cache"), py::arg("indices"), py::arg("scale"), py::arg("attn_sink") = py::none(),
      py::arg("out") = py::none(), py::arg("lse") = py::none(), py::arg("backend") = "", py::arg("stream") = py::none(),
      R"doc(Sparse absorbed MLA over given cache slots -> (out, lse).

q [T, N, L+R] (already absorbed: [q_nope·W_UK | q_pe]); cache a LatentCache
(bf16, f16, fp8_e4m3 or fp8_ds_mla); indices int32 [T, topk] of global slots
(block * block_size + offset), -1 = none; attn_sink float32 [N] or None
(out · e^lse / (e^lse + e^sink)). out [T, N, L] in q's dtype, lse float32
[N, T] natural log (-inf and out 0 for a row with no valid index). A slot
listed twice counts twice. backend: '' (the selector's choice), 'cpu',
'reference' or 'cuda'. docs/sparse.md.)doc");

  py::class_<PyIndexerKeyCache>(m, "IndexerKeyCache", R"doc(
The lightning indexer's paged key cache: uint8 [num_blocks, block_size,
head_dim + 4], each entry head_dim fp8 e4m3 values and one float32 scale.
IndexerKeyCache.empty(...) allocates one (host).)doc")
      .def_static(
          "empty",
          [](py::handle num_blocks, py::handle block_size, py::handle head_dim, py::handle device) {
            constexpr const char* op = "IndexerKeyCache.empty";
            auto owned = std::make_shared<OwnedIndexerKeyCache>(int_arg(num_blocks, op, "num_blocks", 0, kInt64Max),
                                                                int_arg(block_size, op, "block_size", 1, kInt64Max),
                                                                int(int_arg(head_dim, op, "head_dim", 1, kIntMax)),
                                                                device_arg(device));
            return PyIndexerKeyCache{owned->cache(), owned};
          },
          py::arg("num_blocks"), py::arg("block_size"), py::arg("head_dim") = 128, py::arg("device") = "cpu")
      .def_property_readonly("data",
                             [](const PyIndexerKeyCache& c) {
                               return PyTensor{c.cache.data, c.owner};
                             })
      .def_property_readonly("head_dim", [](const PyIndexerKeyCache& c) { return c.cache.head_dim; })
      .def_property_readonly("num_blocks", [](const PyIndexerKeyCache& c) { return c.cache.num_blocks(); })
      .def_property_readonly("block_size", [](const PyIndexerKeyCache& c) { return c.cache.block_size(); });

  m.def(
      "indexer_k_cache_write",
      [](py::object k, py::handle cache_obj, py::object slot_mapping) {
        const auto& cache =
            class_arg<PyIndexerKeyCache>(cache_obj, "indexer_k_cache_write", "cache", "IndexerKeyCache");
        ArrayArgs args("indexer_k_cache_write", py::none());
        const Tensor tk = args.get(k, "k"), ts = args.get(slot_mapping, "slot_mapping");
        py::gil_scoped_release release;
        indexer_k_cache_write(tk, cache.cache, ts);
      },
      py::arg("k"), py::arg("cache"), py::arg("slot_mapping"),
      "Writes key k[t] ([T, head_dim]) quantized per token (scale = amax / 448) to slot slot_mapping[t] (int64; -1 "
      "skips).");

  const auto indexer_args = [](ArrayArgs& args, py::object q, py::object weights, py::object block_table,
                               py::object query_start_loc, py::object seq_lens) {
    return IndexerArgs{args.get(q, "q"), args.get(weights, "weights"), args.get(block_table, "block_table"),
                       args.get(query_start_loc, "query_start_loc"), args.get(seq_lens, "seq_lens")};
  };

  m.def(
      "indexer_logits",
      [indexer_args](py::object q, py::object weights, py::handle cache_obj, py::object block_table,
                     py::object query_start_loc, py::object seq_lens, py::object logits, py::handle backend_obj) {
        constexpr const char* op = "indexer_logits";
        const auto& cache = class_arg<PyIndexerKeyCache>(cache_obj, op, "cache", "IndexerKeyCache");
        const std::string backend = str_arg(backend_obj, op, "backend");
        ArrayArgs args(op, py::none());
        const IndexerArgs a = indexer_args(args, q, weights, block_table, query_start_loc, seq_lens);
        const Tensor tl = args.get_writable(logits, "logits");
        py::gil_scoped_release release;
        indexer_logits(a, cache.cache, tl, backend);
      },
      py::arg("q"), py::arg("weights"), py::arg("cache"), py::arg("block_table"), py::arg("query_start_loc"),
      py::arg("seq_lens"), py::arg("logits"), py::arg("backend") = "",
      "logits[t, p] = sum_h weights[t, h] relu(q[t, h] . key(p)) for p <= the token's position, -inf after.");

  m.def(
      "indexer_topk",
      [indexer_args](py::object q, py::object weights, py::handle cache_obj, py::object block_table,
                     py::object query_start_loc, py::object seq_lens, py::handle topk_obj, py::handle backend_obj) {
        constexpr const char* op = "indexer_topk";
        const auto& cache = class_arg<PyIndexerKeyCache>(cache_obj, op, "cache", "IndexerKeyCache");
        const int topk = int(int_arg(topk_obj, op, "topk", 1, kIntMax));
        const std::string backend = str_arg(backend_obj, op, "backend");
        ArrayArgs args(op, py::none());
        const IndexerArgs a = indexer_args(args, q, weights, block_table, query_start_loc, seq_lens);
        py::object out = empty_like_framework(q, {a.q.dim() == 3 ? a.q.size(0) : 0, topk}, DType::i32, a.q.device());
        const Tensor to = args.get(out, "topk_indices");
        {
          py::gil_scoped_release release;
          indexer_topk(a, cache.cache, to, backend);
        }
        return out;
      },
      py::arg("q"), py::arg("weights"), py::arg("cache"), py::arg("block_table"), py::arg("query_start_loc"),
      py::arg("seq_lens"), py::arg("topk") = 2048, py::arg("backend") = "",
      R"doc(The lightning indexer's causal top-k -> int32 [T, topk] global slots.

q [T, H, D] and weights float32 [T, H] per token; block_table int32
[B, max_blocks], query_start_loc int32 [B+1], seq_lens int32 [B] (host;
the result lives on q's device: backend 'cuda' for CUDA tensors):
request r's token j sits at position seq_lens[r] - q_len + j and sees
positions up to it. Ranked by logit descending, ties to the lower position,
NaN last; -1 where fewer than topk positions are visible.)doc");
}

}  // namespace lattn::python
