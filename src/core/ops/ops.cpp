// The cache and attention-state ops (lattn/ops.h): every argument is
// validated here first — shapes, dtypes, devices and, for host-resident
// index tensors, every index value — so a refused call has written nothing.
// Then the op runs on the device of its tensors, through that device's ops
// table (core/ops/device_ops.h); the *_unchecked forms (core/ops/forward_ops.h)
// are that second half alone, for MlaAttention::forward's chunk loop.
#include "lattn/ops.h"

#include <string>
#include <unordered_map>

#include "core/ops/device_ops.h"
#include "core/ops/forward_ops.h"
#include "core/types/host_index.h"
#include "lattn/check.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

using detail::check_arg_lazy;
using detail::index_at;

constexpr auto kActivationDtypes = {DType::f16, DType::bf16, DType::f32};

std::string at_index(int64_t value, int64_t i) { return std::to_string(value) + " at index " + std::to_string(i); }

std::string at_index(int64_t value, int64_t i, int64_t j) {
  return std::to_string(value) + " at index [" + std::to_string(i) + ", " + std::to_string(j) + "]";
}

// A [n, 2] int64 host tensor of (src, dst) block ids, each id < the given counts.
void check_block_mapping(const char* op, const Tensor& block_mapping, int64_t src_blocks, int64_t dst_blocks) {
  check_dtype(op, "block_mapping", block_mapping, DType::i64);
  check_device(op, "block_mapping", block_mapping, Device::cpu());
  check_dim(op, "block_mapping", block_mapping, 2);
  check_arg(block_mapping.size(1) == 2, op, "block_mapping", "have shape [n, 2] (rows of src, dst)",
            block_mapping.shape_str());
  for (int64_t i = 0; i < block_mapping.size(0); ++i) {
    const int64_t src = index_at(block_mapping, i, 0), dst = index_at(block_mapping, i, 1);
    check_arg_lazy(
        src >= 0 && src < src_blocks, op, "block_mapping",
        [&] { return "hold source block ids in [0, " + std::to_string(src_blocks) + ")"; },
        [&] { return at_index(src, i, 0); });
    check_arg_lazy(
        dst >= 0 && dst < dst_blocks, op, "block_mapping",
        [&] { return "hold destination block ids in [0, " + std::to_string(dst_blocks) + ")"; },
        [&] { return at_index(dst, i, 1); });
  }
}

// copy_blocks copies its pairs concurrently (one CUDA launch; threads on the
// CPU), so a block written twice, or read and written, in one call would end
// with an order-dependent value. vLLM's copy-on-write only copies into freshly
// allocated blocks; we refuse the rest (docs/mla.md).
void check_copy_targets_are_fresh(const char* op, const Tensor& block_mapping) {
  std::unordered_map<int64_t, int64_t> source_row, destination_row;
  for (int64_t i = 0; i < block_mapping.size(0); ++i) source_row.emplace(index_at(block_mapping, i, 0), i);
  for (int64_t i = 0; i < block_mapping.size(0); ++i) {
    const int64_t dst = index_at(block_mapping, i, 1);
    const auto src = source_row.find(dst);
    check_arg_lazy(
        src == source_row.end(), op, "block_mapping",
        [] { return "destination blocks that are not also sources in the same call"; },
        [&] {
          return "block " + std::to_string(dst) + " as the destination of row " + std::to_string(i) +
                 " and the source of row " + std::to_string(src->second);
        });
    const auto [first, fresh] = destination_row.emplace(dst, i);
    check_arg_lazy(
        fresh, op, "block_mapping", [] { return "each destination block at most once"; },
        [&, first = first] {
          return "block " + std::to_string(dst) + " in rows " + std::to_string(first->second) + " and " +
                 std::to_string(i);
        });
  }
}

}  // namespace

namespace detail {

void concat_and_cache_mla_unchecked(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                                    const Tensor& slot_mapping, Stream stream) {
  const DeviceOps& dev = device_ops(cache.device());
  if (cache.is_fp8_ds_mla()) {  // per-tile quantization: lattn/sparse.h
    dev.concat_and_cache_ds_mla(kv_c, k_pe, cache, slot_mapping, stream);
  } else {
    dev.concat_and_cache_mla(kv_c, k_pe, cache, slot_mapping, stream);
  }
}

void gather_cache_unchecked(const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                            const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts, Stream stream) {
  const DeviceOps& dev = device_ops(cache.device());
  if (cache.is_fp8_ds_mla()) {
    dev.gather_cache_ds_mla(cache, dst, block_table, cu_seq_lens, batch_size, seq_starts, stream);
  } else {
    dev.gather_cache(cache, dst, block_table, cu_seq_lens, batch_size, seq_starts, stream);
  }
}

void merge_attn_states_unchecked(const Tensor& out, const Tensor& out_lse, const Tensor& prefix_out,
                                 const Tensor& prefix_lse, const Tensor& suffix_out, const Tensor& suffix_lse,
                                 Stream stream) {
  device_ops(out.device()).merge_attn_states(out, out_lse, prefix_out, prefix_lse, suffix_out, suffix_lse, stream);
}

}  // namespace detail

void concat_and_cache_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache, const Tensor& slot_mapping,
                          Stream stream) {
  const char* op = "concat_and_cache_mla";
  cache.validate(op);
  const int64_t L = cache.kv_lora_rank, R = cache.qk_rope_head_dim;

  check_dim(op, "kv_c", kv_c, 2);
  check_dtype_in(op, "kv_c", kv_c, kActivationDtypes);
  check_device(op, "kv_c", kv_c, cache.device());
  check_shape(op, "kv_c", kv_c, {kAnySize, L});
  check_last_dim_contiguous(op, "kv_c", kv_c);
  const int64_t num_tokens = kv_c.size(0);

  check_defined(op, "k_pe", k_pe);
  check_arg(k_pe.dim() == 2 || (k_pe.dim() == 3 && k_pe.size(1) == 1), op, "k_pe", "have shape [T, R] or [T, 1, R]",
            k_pe.shape_str());
  const Tensor pe = k_pe.dim() == 3 ? k_pe.select(1, 0) : k_pe;
  check_dtype(op, "k_pe", k_pe, kv_c.dtype());
  check_device(op, "k_pe", k_pe, cache.device());
  check_shape(op, "k_pe", pe, {num_tokens, R});
  check_last_dim_contiguous(op, "k_pe", pe);

  check_dtype(op, "slot_mapping", slot_mapping, DType::i64);
  check_dim(op, "slot_mapping", slot_mapping, 1);
  check_device(op, "slot_mapping", slot_mapping, cache.device());
  check_arg(slot_mapping.size(0) <= num_tokens, op, "slot_mapping",
            "have at most kv_c.size(0) = " + std::to_string(num_tokens) + " entries",
            std::to_string(slot_mapping.size(0)));
  if (slot_mapping.device().is_cpu()) {
    const int64_t capacity = cache.num_blocks() * cache.block_size();
    for (int64_t t = 0; t < slot_mapping.size(0); ++t) {
      const int64_t slot = index_at(slot_mapping, t);
      check_arg_lazy(
          slot < capacity, op, "slot_mapping",
          [&] { return "hold slots < num_blocks * block_size = " + std::to_string(capacity) + " (or PAD_SLOT_ID -1)"; },
          [&] { return at_index(slot, t); });
    }
  }

  detail::concat_and_cache_mla_unchecked(kv_c, pe, cache, slot_mapping, stream);
}

void gather_cache(const LatentCache& cache, const Tensor& dst, const Tensor& block_table, const Tensor& cu_seq_lens,
                  int batch_size, const Tensor& seq_starts, Stream stream) {
  const char* op = "gather_cache";
  cache.validate(op);
  const Device device = cache.device();
  check_arg(batch_size >= 0, op, "batch_size", "be >= 0", std::to_string(batch_size));

  check_dim(op, "dst", dst, 2);
  check_dtype_in(op, "dst", dst, kActivationDtypes);
  check_device(op, "dst", dst, device);
  check_shape(op, "dst", dst, {kAnySize, int64_t(cache.kv_lora_rank) + cache.qk_rope_head_dim});
  check_last_dim_contiguous(op, "dst", dst);

  check_dtype(op, "block_table", block_table, DType::i32);
  check_dim(op, "block_table", block_table, 2);
  check_device(op, "block_table", block_table, device);
  check_arg(block_table.size(0) >= batch_size, op, "block_table",
            "have at least batch_size = " + std::to_string(batch_size) + " rows", block_table.shape_str());

  check_dtype(op, "cu_seq_lens", cu_seq_lens, DType::i32);
  check_dim(op, "cu_seq_lens", cu_seq_lens, 1);
  check_device(op, "cu_seq_lens", cu_seq_lens, device);
  check_arg(cu_seq_lens.size(0) >= batch_size + 1, op, "cu_seq_lens",
            "have at least batch_size + 1 = " + std::to_string(batch_size + 1) + " entries", cu_seq_lens.shape_str());

  if (seq_starts.defined()) {
    check_dtype(op, "seq_starts", seq_starts, DType::i32);
    check_dim(op, "seq_starts", seq_starts, 1);
    check_device(op, "seq_starts", seq_starts, device);
    check_arg(seq_starts.size(0) >= batch_size, op, "seq_starts",
              "have at least batch_size = " + std::to_string(batch_size) + " entries", seq_starts.shape_str());
  }

  if (device.is_cpu()) {
    const int64_t block_size = cache.block_size();
    for (int b = 0; b < batch_size; ++b) {
      const int64_t begin = index_at(cu_seq_lens, b), end = index_at(cu_seq_lens, b + 1);
      check_arg_lazy(
          begin >= 0 && end >= begin, op, "cu_seq_lens", [] { return "be non-negative and non-decreasing"; },
          [&] { return at_index(end, b + 1) + " after " + std::to_string(begin); });
      const int64_t start = seq_starts.defined() ? index_at(seq_starts, b) : 0;
      // The kernel addresses blocks from start / block_size: an unaligned
      // start would silently drop its in-block offset (docs/mla.md).
      check_arg_lazy(
          start >= 0 && start % block_size == 0, op, "seq_starts",
          [&] { return "hold non-negative multiples of block_size " + std::to_string(block_size); },
          [&] { return at_index(start, b); });
      if (end == begin) continue;
      const int64_t first = start / block_size, last = first + (end - begin - 1) / block_size;
      check_arg_lazy(
          last < block_table.size(1), op, "block_table",
          [&] { return "have at least " + std::to_string(last + 1) + " columns for batch row " + std::to_string(b); },
          [&] { return block_table.shape_str(); });
      const int64_t num_blocks = cache.num_blocks();
      for (int64_t j = first; j <= last; ++j) {
        const int64_t block = index_at(block_table, b, j);
        check_arg_lazy(
            block >= 0 && block < num_blocks, op, "block_table",
            [&] { return "hold block ids in [0, num_blocks = " + std::to_string(num_blocks) + ")"; },
            [&] { return at_index(block, b, j); });
      }
    }
    const int64_t total = batch_size > 0 ? index_at(cu_seq_lens, batch_size) : 0;
    check_arg(total <= dst.size(0), op, "dst",
              "have at least cu_seq_lens[batch_size] = " + std::to_string(total) + " rows", dst.shape_str());
  }
  detail::gather_cache_unchecked(cache, dst, block_table, cu_seq_lens, batch_size, seq_starts, stream);
}

void merge_attn_states(const Tensor& out, const Tensor& out_lse, const Tensor& prefix_out, const Tensor& prefix_lse,
                       const Tensor& suffix_out, const Tensor& suffix_lse, Stream stream) {
  const char* op = "merge_attn_states";
  check_dim(op, "output", out, 3);
  check_dtype_in(op, "output", out, kActivationDtypes);
  check_last_dim_contiguous(op, "output", out);
  const Device device = out.device();
  const int64_t T = out.size(0), N = out.size(1), D = out.size(2);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor&>{"prefix_output", prefix_out},
                                std::pair<const char*, const Tensor&>{"suffix_output", suffix_out}}) {
    check_dtype_in(op, name, t, kActivationDtypes);
    check_device(op, name, t, device);
    check_shape(op, name, t, {T, N, D});
    check_last_dim_contiguous(op, name, t);
  }
  for (const auto& [name, t] : {std::pair<const char*, const Tensor&>{"prefix_lse", prefix_lse},
                                std::pair<const char*, const Tensor&>{"suffix_lse", suffix_lse}}) {
    check_dtype(op, name, t, DType::f32);
    check_device(op, name, t, device);
    check_shape(op, name, t, {N, T});
  }
  if (out_lse.defined()) {
    check_dtype(op, "output_lse", out_lse, DType::f32);
    check_device(op, "output_lse", out_lse, device);
    check_shape(op, "output_lse", out_lse, {N, T});
    // The LSE is read per (head, token) before it is written, but the output
    // rows are merged after both LSEs were read: an aliased out_lse would be
    // overwritten while other elements still need the old value.
    check_arg(out_lse.data() != prefix_lse.data() && out_lse.data() != suffix_lse.data(), op, "output_lse",
              "not alias prefix_lse or suffix_lse", "an aliasing tensor");
  }
  detail::merge_attn_states_unchecked(out, out_lse, prefix_out, prefix_lse, suffix_out, suffix_lse, stream);
}

void copy_blocks(std::span<const LatentCache> caches, const Tensor& block_mapping, Stream stream) {
  const char* op = "copy_blocks";
  if (caches.empty()) return;  // no layers: nothing to copy
  const Device device = caches[0].device();
  for (const LatentCache& cache : caches) {
    cache.validate(op);
    check_device(op, "kv_caches", cache.data, device);
    check_block_mapping(op, block_mapping, cache.num_blocks(), cache.num_blocks());
  }
  check_copy_targets_are_fresh(op, block_mapping);
  detail::device_ops(device).copy_blocks(caches, block_mapping, stream);
}

void swap_blocks(const LatentCache& src, const LatentCache& dst, const Tensor& block_mapping, Stream stream) {
  const char* op = "swap_blocks";
  src.validate(op);
  dst.validate(op);
  check_dtype(op, "dst", dst.data, src.dtype());
  check_arg(dst.block_size() == src.block_size() && dst.entry_dim() == src.entry_dim(), op, "dst",
            "have the block shape of src [*, " + std::to_string(src.block_size()) + ", " +
                std::to_string(src.entry_dim()) + "]",
            dst.data.shape_str());
  if (src.device().is_cuda() && dst.device().is_cuda()) {
    check_arg(src.device() == dst.device(), op, "dst", "be on the same GPU as src (" + device_name(src.device()) + ")",
              device_name(dst.device()));
  }
  check_block_mapping(op, block_mapping, src.num_blocks(), dst.num_blocks());

  detail::device_ops(src.device(), dst.device()).swap_blocks(src, dst, block_mapping, stream);
}

}  // namespace lattn
