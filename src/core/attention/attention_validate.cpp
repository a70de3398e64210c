// Every check MlaAttention::forward makes before it writes anything (see
// core/attention/attention_impl.h). Index arrays are read from the metadata's host
// copies (X_cpu), so validating a CUDA step costs no device round trip.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "core/attention/attention_impl.h"
#include "core/metadata/view_pairs.h"
#include "core/types/cache_checks.h"
#include "core/types/host_index.h"
#include "lattn/check.h"
#include "lattn/errors.h"

namespace lattn::detail {
namespace {

constexpr const char* kOp = "forward";

std::string str(int64_t v) { return std::to_string(v); }

// A host index array of `dtype` with exactly the given shape.
void check_index_array(const char* name, const Tensor& t, std::initializer_list<int64_t> shape, DType dtype) {
  check_defined(kOp, name, t);
  check_dtype(kOp, name, t, dtype);
  check_device(kOp, name, t, Device::cpu());
  check_shape(kOp, name, t, shape);
}

// The device copy X of a host index array X_cpu: defined, on `device`, same shape.
void check_device_copy(const char* name, const Tensor& device_copy, const Tensor& host, Device device) {
  check_view_pair(kOp, {name, &host, &device_copy}, device);
}

// query_start_loc [n+1]: starts at 0, every request has >= 1 token, ends at num_tokens.
void check_query_start_loc(const char* name, const Tensor& qsl, int64_t num_requests, int64_t num_tokens) {
  check_index_array(name, qsl, {num_requests + 1}, DType::i32);
  check_arg(index_at(qsl, 0) == 0, kOp, name, "start at 0", str(index_at(qsl, 0)));
  for (int64_t r = 0; r < num_requests; ++r) {
    const int64_t len = index_at(qsl, r + 1) - index_at(qsl, r);
    check_arg_lazy(
        len >= 1, kOp, name, [] { return "give every request at least one query token"; },
        [&] { return "query length " + str(len) + " for request " + str(r); });
  }
  check_arg(index_at(qsl, num_requests) == num_tokens, kOp, name, "end at the view's token count " + str(num_tokens),
            str(index_at(qsl, num_requests)));
}

// The first `num_tokens` cache positions of request row r map to blocks inside the cache.
void check_block_row(const char* name, const Tensor& block_table, int64_t r, int64_t num_tokens,
                     const LatentCache& cache) {
  const int64_t blocks = (num_tokens + cache.block_size() - 1) / cache.block_size();
  check_arg_lazy(
      blocks <= block_table.size(1), kOp, name,
      [&] {
        return "have at least " + str(blocks) + " columns for request row " + str(r) + " (" + str(num_tokens) +
               " tokens)";
      },
      [&] { return block_table.shape_str(); });
  const int64_t num_blocks = cache.num_blocks();
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t block = index_at(block_table, r, b);
    check_arg_lazy(
        block >= 0 && block < num_blocks, kOp, name,
        [&] { return "hold block ids in [0, num_blocks = " + str(num_blocks) + ")"; },
        [&] { return str(block) + " at [" + str(r) + ", " + str(b) + "]"; });
  }
}

// What the decode and prefill views share: their token count is the
// metadata's, and query_start_loc, seq_lens and block_table hold their
// `requests` rows.
struct ViewArrays {
  int64_t tokens, requests;
  const Tensor &query_start_loc, &seq_lens, &block_table;  // the host copies
};
ViewArrays view_arrays(const DecodeMetadata& d) {
  return {d.num_decode_tokens, d.num_decodes, d.query_start_loc_cpu, d.seq_lens_cpu, d.block_table_cpu};
}
ViewArrays view_arrays(const PrefillMetadata& p) {
  return {p.num_prefill_tokens, p.num_prefills, p.query_start_loc_cpu, p.seq_lens_cpu, p.block_table_cpu};
}

// The metadata's view of `kind` ("decode" or "prefill"): present exactly
// when the metadata counts tokens of that kind, and then its shared arrays
// checked. Null when absent.
template <class View>
const View* checked_view(const std::string& kind, const std::optional<View>& view, int64_t metadata_tokens) {
  const std::string name = "metadata." + kind, tokens = "num_" + kind + "_tokens";
  check_arg(view.has_value() == (metadata_tokens > 0), kOp, name.c_str(), "be present exactly when " + tokens + " > 0",
            view ? "present" : "absent");
  if (!view) return nullptr;
  const ViewArrays v = view_arrays(*view);
  check_arg(v.tokens == metadata_tokens, kOp, (name + "." + tokens).c_str(),
            "equal metadata." + tokens + " = " + str(metadata_tokens), str(v.tokens));
  check_query_start_loc((name + ".query_start_loc").c_str(), v.query_start_loc, v.requests, v.tokens);
  check_index_array((name + ".seq_lens").c_str(), v.seq_lens, {v.requests}, DType::i32);
  const std::string table = name + ".block_table";
  check_dim(kOp, table.c_str(), v.block_table, 2);
  check_index_array(table.c_str(), v.block_table, {v.requests, kAnySize}, DType::i32);
  return &*view;
}

void check_decode_view(const MlaAttention::Impl& impl, const MlaMetadata& md, const LatentCache& cache) {
  const DecodeMetadata* view = checked_view("decode", md.decode, md.num_decode_tokens);
  if (!view) return;
  const DecodeMetadata& dm = *view;
  // A sparse layer's rows all take the same path: any query length.
  const int64_t max_queries = impl.decode_class ? impl.decode_class->max_query_tokens_per_request() : INT64_MAX;
  for (int64_t r = 0; r < dm.num_decodes; ++r) {
    const int64_t num_queries = index_at(dm.query_start_loc_cpu, r + 1) - index_at(dm.query_start_loc_cpu, r);
    check_arg_lazy(
        num_queries <= max_queries, kOp, "metadata.decode.query_start_loc",
        [&] {
          return "give decodes at most " + str(max_queries) + " query tokens (decode backend " +
                 (impl.decode_class ? impl.decode_class->name() : std::string("sparse")) + ")";
        },
        [&] { return str(num_queries) + " for decode " + str(r); });
    const int64_t seq_len = index_at(dm.seq_lens_cpu, r);
    check_arg_lazy(
        seq_len >= num_queries, kOp, "metadata.decode.seq_lens",
        [&] { return "be >= the request's query length " + str(num_queries); },
        [&] { return str(seq_len) + " for decode " + str(r); });
    check_block_row("metadata.decode.block_table", dm.block_table_cpu, r, seq_len, cache);
  }
}

// The context-chunk plan must cover each prefill's context exactly once, in
// order, with page-aligned starts (what gather_cache relies on).
void check_chunk_plan(const PrefillMetadata& pm, const LatentCache& cache) {
  const ContextChunkPlan& plan = pm.chunks;
  const int64_t num_chunks = plan.num_chunks, np = pm.num_prefills;
  check_arg(num_chunks >= 0 && plan.seq_tot.size() == size_t(num_chunks), kOp, "metadata.prefill.chunks.seq_tot",
            "have num_chunks = " + str(num_chunks) + " entries", str(int64_t(plan.seq_tot.size())));
  if (num_chunks == 0) {
    for (int64_t p = 0; p < np; ++p) {
      check_arg_lazy(
          index_at(pm.context_lens_cpu, p) == 0, kOp, "metadata.prefill.chunks",
          [] { return "plan context chunks when a prefill has context"; },
          [&] {
            return "no chunks and context length " + str(index_at(pm.context_lens_cpu, p)) + " for prefill " + str(p);
          });
    }
    return;
  }
  check_index_array("metadata.prefill.chunks.starts", plan.starts_cpu, {num_chunks, np}, DType::i32);
  check_index_array("metadata.prefill.chunks.cu_seq_lens", plan.cu_seq_lens_cpu, {num_chunks, np + 1}, DType::i32);
  const int64_t block_size = cache.block_size();
  for (int64_t p = 0; p < np; ++p) {
    int64_t covered = 0;
    for (int64_t i = 0; i < num_chunks; ++i) {
      const int64_t start = index_at(plan.starts_cpu, i, p);
      const int64_t len = index_at(plan.cu_seq_lens_cpu, i, p + 1) - index_at(plan.cu_seq_lens_cpu, i, p);
      check_arg_lazy(
          len >= 0, kOp, "metadata.prefill.chunks.cu_seq_lens", [] { return "be non-decreasing"; },
          [&] { return "a chunk of " + str(len) + " tokens (chunk " + str(i) + ", prefill " + str(p) + ")"; });
      if (len == 0) continue;
      check_arg_lazy(
          start % block_size == 0 && start == covered, kOp, "metadata.prefill.chunks.starts",
          [&] {
            return "continue where the previous chunk ended (" + str(covered) + ") at a multiple of block_size " +
                   str(block_size);
          },
          [&] { return str(start) + " (chunk " + str(i) + ", prefill " + str(p) + ")"; });
      covered += len;
    }
    check_arg_lazy(
        covered == index_at(pm.context_lens_cpu, p), kOp, "metadata.prefill.chunks",
        [&] {
          return "cover prefill " + str(p) + "'s context of " + str(index_at(pm.context_lens_cpu, p)) + " tokens";
        },
        [&] { return str(covered) + " tokens"; });
  }
  for (int64_t i = 0; i < num_chunks; ++i) {
    check_arg_lazy(
        index_at(plan.cu_seq_lens_cpu, i, 0) == 0 && index_at(plan.cu_seq_lens_cpu, i, np) == plan.seq_tot[size_t(i)],
        kOp, "metadata.prefill.chunks.cu_seq_lens",
        [&] { return "run from 0 to seq_tot[" + str(i) + "] = " + str(plan.seq_tot[size_t(i)]); },
        [&] { return str(index_at(plan.cu_seq_lens_cpu, i, 0)) + ".." + str(index_at(plan.cu_seq_lens_cpu, i, np)); });
  }
}

void check_prefill_view(const MlaMetadata& md, const LatentCache& cache, Device device) {
  const PrefillMetadata* view = checked_view("prefill", md.prefill, md.num_prefill_tokens);
  if (!view) return;
  const PrefillMetadata& pm = *view;
  check_index_array("metadata.prefill.context_lens", pm.context_lens_cpu, {pm.num_prefills}, DType::i32);
  for (int64_t p = 0; p < pm.num_prefills; ++p) {
    const int64_t context = index_at(pm.context_lens_cpu, p);
    const int64_t query = index_at(pm.query_start_loc_cpu, p + 1) - index_at(pm.query_start_loc_cpu, p);
    check_arg_lazy(
        context >= 0 && index_at(pm.seq_lens_cpu, p) == context + query, kOp, "metadata.prefill.seq_lens",
        [&] { return "equal context_len + query_len = " + str(context) + " + " + str(query); },
        [&] { return str(index_at(pm.seq_lens_cpu, p)) + " for prefill " + str(p); });
    // Only the context is read back from the cache (the new tokens come from the inputs).
    check_block_row("metadata.prefill.block_table", pm.block_table_cpu, p, context, cache);
  }
  check_chunk_plan(pm, cache);
  if (pm.chunks.num_chunks > 0) {  // what the forward itself hands to gather_cache
    check_device_copy("metadata.prefill.block_table", pm.block_table, pm.block_table_cpu, device);
    check_device_copy("metadata.prefill.chunks.starts", pm.chunks.starts, pm.chunks.starts_cpu, device);
    check_device_copy("metadata.prefill.chunks.cu_seq_lens", pm.chunks.cu_seq_lens, pm.chunks.cu_seq_lens_cpu, device);
  }
}

}  // namespace

ForwardArgs validate_forward(const MlaAttention::Impl& impl, const Tensor& q, const Tensor& kv_c_normed,
                             const Tensor& k_pe, const LatentCache& cache, const MlaMetadata& md, const Tensor& out,
                             const Tensor& output_scale) {
  const MlaAttentionConfig& c = impl.config;
  const MlaDims& d = c.dims;
  const int64_t N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim, R = d.qk_rope_head_dim, V = d.v_head_dim;
  if (!impl.w_uk_t) {
    throw ValueError("forward: process_weights_after_loading must be called before the first forward");
  }
  ForwardArgs args;

  // q: [T, N, P+R] or [T, N*(P+R)] (viewed as the former).
  check_defined(kOp, "q", q);
  check_dtype(kOp, "q", q, c.dtype);
  check_device(kOp, "q", q, c.device);
  check_arg(q.dim() == 2 || q.dim() == 3, kOp, "q",
            "have shape [T, " + str(N) + ", " + str(P + R) + "] or [T, " + str(N * (P + R)) + "]", q.shape_str());
  if (q.dim() == 3) {
    check_shape(kOp, "q", q, {kAnySize, N, P + R});
    check_last_dim_contiguous(kOp, "q", q);
    args.q = q;
  } else {
    check_shape(kOp, "q", q, {kAnySize, N * (P + R)});
    check_last_dim_contiguous(kOp, "q", q);
    const int64_t shape[] = {q.size(0), N, P + R}, strides[] = {q.stride(0), P + R, 1};
    args.q = Tensor(q.data(), q.dtype(), shape, strides, q.device());
  }
  const int64_t T = q.size(0);
  args.num_tokens = T;

  check_dtype(kOp, "kv_c_normed", kv_c_normed, c.dtype);
  check_device(kOp, "kv_c_normed", kv_c_normed, c.device);
  check_shape(kOp, "kv_c_normed", kv_c_normed, {T, L});
  check_last_dim_contiguous(kOp, "kv_c_normed", kv_c_normed);
  args.kv_c = kv_c_normed;

  check_dtype(kOp, "k_pe", k_pe, c.dtype);
  check_device(kOp, "k_pe", k_pe, c.device);
  check_arg(k_pe.dim() == 2 || (k_pe.dim() == 3 && k_pe.size(1) == 1), kOp, "k_pe",
            "have shape [" + str(T) + ", " + str(R) + "] or [" + str(T) + ", 1, " + str(R) + "]", k_pe.shape_str());
  args.k_pe = k_pe.dim() == 3 ? k_pe.select(1, 0) : k_pe;
  check_shape(kOp, "k_pe", args.k_pe, {T, R});
  check_last_dim_contiguous(kOp, "k_pe", args.k_pe);

  // The cache: this layer's, in the configured dtype.
  cache.validate(kOp);
  // Its block size is checked against the metadata's below (config.block_size
  // only chose the backends).
  check_cache_matches(kOp, cache, c.kv_cache_spec(), "the layer", /*check_block_size=*/false);
  check_device(kOp, "cache", cache.data, c.device);
  args.write_cache = cache.data.numel() > 0;

  // Outputs.
  args.quantize = output_scale.defined();
  if (args.quantize) {
    check_dtype(kOp, "output_scale", output_scale, DType::f32);
    check_device(kOp, "output_scale", output_scale, c.device);
    check_arg(output_scale.numel() == 1, kOp, "output_scale", "have one element", output_scale.shape_str());
  }
  if (out.defined()) {
    check_dtype(kOp, "out", out, args.quantize ? DType::fp8_e4m3 : c.dtype);
    check_device(kOp, "out", out, c.device);
    check_shape(kOp, "out", out, {T, N * V});
    check_last_dim_contiguous(kOp, "out", out);
  }

  // The metadata: token counts, then every index the step will follow.
  check_arg(md.device == c.device, kOp, "metadata",
            "be on the layer's device " + device_name(c.device) + " (MlaMetadata::to_device)", device_name(md.device));
  // Under CUDA-graph padding the padded decodes count as decode tokens, so
  // num_decode_tokens + num_prefill_tokens may exceed num_actual_tokens.
  const int64_t computed = int64_t(md.num_decode_tokens) + md.num_prefill_tokens;
  check_arg(md.num_decode_tokens >= 0 && md.num_prefill_tokens >= 0 && computed >= md.num_actual_tokens, kOp,
            "metadata", "have num_decode_tokens + num_prefill_tokens >= num_actual_tokens",
            str(md.num_decode_tokens) + " + " + str(md.num_prefill_tokens) + " vs " + str(md.num_actual_tokens));
  check_arg(computed <= T, kOp, "q",
            "have at least metadata.num_decode_tokens + num_prefill_tokens = " + str(computed) + " rows", str(T));
  check_arg(md.block_size == cache.block_size(), kOp, "metadata.block_size",
            "equal the cache's block size " + str(cache.block_size()), str(md.block_size));
  if (args.write_cache) {
    check_dim(kOp, "metadata.slot_mapping", md.slot_mapping_cpu, 1);
    check_dtype(kOp, "metadata.slot_mapping", md.slot_mapping_cpu, DType::i64);
    check_device(kOp, "metadata.slot_mapping", md.slot_mapping_cpu, Device::cpu());
    check_arg(md.slot_mapping_cpu.size(0) >= md.num_actual_tokens && md.slot_mapping_cpu.size(0) <= T, kOp,
              "metadata.slot_mapping",
              "have between num_actual_tokens = " + str(md.num_actual_tokens) + " and T = " + str(T) + " entries",
              str(md.slot_mapping_cpu.size(0)));
    check_device_copy("metadata.slot_mapping", md.slot_mapping, md.slot_mapping_cpu, c.device);
    const int64_t capacity = cache.num_blocks() * cache.block_size();
    for (int64_t t = 0; t < md.slot_mapping_cpu.size(0); ++t) {
      const int64_t slot = index_at(md.slot_mapping_cpu, t);
      check_arg_lazy(
          slot < capacity, kOp, "metadata.slot_mapping",
          [&] { return "hold slots < num_blocks * block_size = " + str(capacity) + " (or PAD_SLOT_ID -1)"; },
          [&] { return str(slot) + " at index " + str(t); });
    }
  }
  check_decode_view(impl, md, cache);
  check_prefill_view(md, cache, c.device);
  return args;
}

}  // namespace lattn::detail
