// The lightning indexer's public ops (lattn/sparse.h): the key cache, its
// write, logits and top-k. Every argument — and every index value that lives
// on the host — is checked here before anything is written; the device-ops
// table computes (src/cpu/indexer_cpu.cpp, src/cuda/smxx/indexer.cu).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/device_ops.h"
#include "lattn/check.h"
#include "lattn/errors.h"
#include "lattn/sparse.h"

namespace lattn {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

int32_t i32_at(const Tensor& t, int64_t i) { return t.data_as<const int32_t>()[i * t.stride(0)]; }

// An index array: int32 with `dims` dims, on the host or on `device`.
void check_index_i32(const char* op, const char* arg, const Tensor& t, int dims, Device device) {
  check_defined(op, arg, t);
  check_dtype(op, arg, t, DType::i32);
  check_dim(op, arg, t, dims);
  if (!t.device().is_cpu()) check_device(op, arg, t, device);
}

void check_host_i32(const char* op, const char* arg, const Tensor& t, int dims) {
  check_index_i32(op, arg, t, dims, Device::cpu());
  check_device(op, arg, t, Device::cpu());
}

// Checks IndexerArgs against the cache; returns the longest visible length
// (max over tokens of position + 1), read from the host arrays, or
// args.max_seq_len when they live on the device (values unchecked there).
// An output of the indexer: [T, >= min_cols] of `dtype` on `device`, rows
// contiguous; `cols` says the width in the refusal's expected shape.
void check_indexer_output(const char* op, const char* arg, const Tensor& t, DType dtype, Device device, int64_t T,
                          int64_t min_cols, const std::string& cols) {
  check_defined(op, arg, t);
  check_dtype(op, arg, t, dtype);
  check_device(op, arg, t, device);
  check_dim(op, arg, t, 2);
  check_arg(t.size(0) == T && t.size(1) >= min_cols, op, arg, "have shape [" + str(T) + ", " + cols + "]",
            t.shape_str());
  check_last_dim_contiguous(op, arg, t);
}

int64_t check_indexer_args(const char* op, const IndexerArgs& a, const IndexerKeyCache& cache) {
  cache.validate(op);
  const Device device = cache.device();
  check_defined(op, "q", a.q);
  check_dim(op, "q", a.q, 3);
  check_dtype_in(op, "q", a.q, {DType::f32, DType::f16, DType::bf16});
  check_device(op, "q", a.q, device);
  check_shape(op, "q", a.q, {kAnySize, kAnySize, cache.head_dim});
  check_last_dim_contiguous(op, "q", a.q);
  const int64_t T = a.q.size(0), H = a.q.size(1);
  check_defined(op, "weights", a.weights);
  check_dtype(op, "weights", a.weights, DType::f32);
  check_device(op, "weights", a.weights, device);
  check_shape(op, "weights", a.weights, {T, H});
  check_index_i32(op, "block_table", a.block_table, 2, device);
  check_index_i32(op, "query_start_loc", a.query_start_loc, 1, device);
  check_index_i32(op, "seq_lens", a.seq_lens, 1, device);
  const int64_t B = a.seq_lens.size(0);
  check_arg(a.query_start_loc.size(0) == B + 1, op, "query_start_loc",
            "have seq_lens.size(0) + 1 = " + str(B + 1) + " entries", a.query_start_loc.shape_str());
  check_arg(a.block_table.size(0) >= B, op, "block_table", "have at least " + str(B) + " rows",
            a.block_table.shape_str());
  const bool host =
      a.block_table.device().is_cpu() && a.query_start_loc.device().is_cpu() && a.seq_lens.device().is_cpu();
  if (!host) {
    check_arg(device.is_cuda(), op, "block_table", "be on the host for host tensors",
              device_name(a.block_table.device()));
    check_arg(a.max_seq_len > 0, op, "max_seq_len",
              "be given (> 0) when the index arrays are on the device (their values are not read on the host)",
              str(a.max_seq_len));
    return a.max_seq_len;
  }
  check_arg(i32_at(a.query_start_loc, 0) == 0 && i32_at(a.query_start_loc, B) == T, op, "query_start_loc",
            "start at 0 and end at q.size(0) = " + str(T),
            str(i32_at(a.query_start_loc, 0)) + " ... " + str(i32_at(a.query_start_loc, B)));
  const int64_t bs = cache.block_size();
  int64_t longest = 0;
  for (int64_t r = 0; r < B; ++r) {
    const int32_t q0 = i32_at(a.query_start_loc, r), q1 = i32_at(a.query_start_loc, r + 1), len = i32_at(a.seq_lens, r);
    check_arg(q1 >= q0, op, "query_start_loc", "be non-decreasing",
              str(q1) + " after " + str(q0) + " at request " + str(r));
    check_arg(len >= q1 - q0, op, "seq_lens", "be >= the request's query length " + str(q1 - q0),
              str(len) + " at request " + str(r));
    check_arg(a.max_seq_len == 0 || len <= a.max_seq_len, op, "seq_lens", "be <= max_seq_len = " + str(a.max_seq_len),
              str(len) + " at request " + str(r));
    const int64_t blocks = (int64_t(len) + bs - 1) / bs;
    check_arg(blocks <= a.block_table.size(1), op, "block_table",
              "have " + str(blocks) + " columns for request " + str(r), a.block_table.shape_str());
    for (int64_t b = 0; b < blocks; ++b) {
      const int32_t id =
          a.block_table.data_as<const int32_t>()[r * a.block_table.stride(0) + b * a.block_table.stride(1)];
      if (id >= 0 && id < cache.num_blocks()) continue;  // (the message is built only for a bad id)
      check_arg(false, op, "block_table", "hold block ids in [0, " + str(cache.num_blocks()) + ")",
                str(id) + " at [" + str(r) + ", " + str(b) + "]");
    }
    if (q1 > q0) longest = std::max<int64_t>(longest, len);
  }
  return longest;
}

bool use_reference(const char* op, const std::string& backend, Device device) {
  const std::string own = device.is_cuda() ? "cuda" : "cpu";
  if (backend == "reference") {
    check_arg(device.is_cpu(), op, "backend", "name a backend of the tensors' device (" + own + ")",
              "'reference' (it runs on host tensors only)");
    return true;
  }
  if (backend.empty() || backend == own) return false;
  throw ValueError(std::string(op) + ": argument 'backend' must be one of reference (host tensors), " + own +
                   " (or empty), got '" + backend + "'");
}

}  // namespace

void IndexerKeyCache::validate(const char* op) const {
  check_defined(op, "cache", data);
  check_dim(op, "cache", data, 3);
  check_dtype(op, "cache", data, DType::u8);
  check_arg(head_dim > 0, op, "cache", "declare a positive head_dim", str(head_dim));
  check_arg(data.size(2) == head_dim + 4, op, "cache",
            "have entries of head_dim + 4 = " + str(head_dim + 4) + " bytes (fp8 key, f32 scale)", data.shape_str());
  check_arg(data.size(1) >= 1, op, "cache", "have block size >= 1", str(data.size(1)));
  check_arg(data.stride(2) == 1 && data.stride(1) == data.size(2) && data.stride(0) % 4 == 0, op, "cache",
            "have contiguous entries and 4-byte aligned blocks", data.describe());
}

OwnedIndexerKeyCache::OwnedIndexerKeyCache(int64_t num_blocks, int64_t block_size, int head_dim, Device device) {
  if (num_blocks < 0 || block_size < 1 || head_dim < 1) {
    throw ValueError("OwnedIndexerKeyCache: need num_blocks >= 0, block_size >= 1 and head_dim >= 1, got " +
                     str(num_blocks) + ", " + str(block_size) + " and " + str(head_dim));
  }
  storage_ = OwnedTensor::empty({num_blocks, block_size, int64_t(head_dim) + 4}, DType::u8, device);
  cache_ = IndexerKeyCache{storage_.tensor(), head_dim};
  cache_.validate("OwnedIndexerKeyCache");
}

void indexer_k_cache_write(const Tensor& k, const IndexerKeyCache& cache, const Tensor& slot_mapping, Stream stream) {
  const char* op = "indexer_k_cache_write";
  cache.validate(op);
  const Device device = cache.device();
  check_defined(op, "k", k);
  check_dim(op, "k", k, 2);
  check_dtype_in(op, "k", k, {DType::f32, DType::f16, DType::bf16});
  check_device(op, "k", k, device);
  check_shape(op, "k", k, {kAnySize, cache.head_dim});
  check_last_dim_contiguous(op, "k", k);
  check_defined(op, "slot_mapping", slot_mapping);
  check_dtype(op, "slot_mapping", slot_mapping, DType::i64);
  check_dim(op, "slot_mapping", slot_mapping, 1);
  check_device(op, "slot_mapping", slot_mapping, device);
  check_arg(slot_mapping.size(0) <= k.size(0), op, "slot_mapping",
            "have at most k.size(0) = " + str(k.size(0)) + " entries", str(slot_mapping.size(0)));
  if (device.is_cpu()) {  // device-resident slots: the kernel skips those outside the cache
    const int64_t capacity = cache.num_blocks() * cache.block_size();
    for (int64_t t = 0; t < slot_mapping.size(0); ++t) {
      const int64_t slot = slot_mapping.data_as<const int64_t>()[t * slot_mapping.stride(0)];
      if (slot < capacity) continue;  // (the message is built only for a bad slot)
      check_arg(false, op, "slot_mapping", "hold slots < num_blocks * block_size = " + str(capacity) + " (or -1)",
                str(slot) + " at index " + str(t));
    }
  }
  if (slot_mapping.size(0) == 0) return;
  detail::device_ops(device).indexer_k_cache_write(k, cache, slot_mapping, stream);
}

void indexer_logits(const IndexerArgs& a, const IndexerKeyCache& cache, const Tensor& logits,
                    const std::string& backend) {
  const char* op = "indexer_logits";
  const int64_t longest = check_indexer_args(op, a, cache);
  const bool ref = use_reference(op, backend, cache.device());
  const int64_t T = a.q.size(0);
  check_indexer_output(op, "logits", logits, DType::f32, cache.device(), T, longest, ">= " + str(longest));
  if (T == 0) return;
  detail::device_ops(cache.device()).indexer_logits(a, cache, logits, ref);
}

void indexer_topk(const IndexerArgs& a, const IndexerKeyCache& cache, const Tensor& topk_indices,
                  const std::string& backend) {
  const char* op = "indexer_topk";
  check_indexer_args(op, a, cache);
  const bool ref = use_reference(op, backend, cache.device());
  const int64_t T = a.q.size(0);
  check_indexer_output(op, "topk_indices", topk_indices, DType::i32, cache.device(), T, 1, "topk >= 1");
  if (T == 0) return;
  detail::device_ops(cache.device()).indexer_topk(a, cache, topk_indices, ref);
}

void topk_positions(const Tensor& logits, const Tensor& lengths, const Tensor& out) {
  const char* op = "topk_positions";
  check_defined(op, "logits", logits);
  check_dtype(op, "logits", logits, DType::f32);
  const Device device = logits.device();
  check_dim(op, "logits", logits, 2);
  check_last_dim_contiguous(op, "logits", logits);
  const int64_t T = logits.size(0);
  if (device.is_cpu()) {
    check_host_i32(op, "lengths", lengths, 1);
  } else {
    check_index_i32(op, "lengths", lengths, 1, device);
    check_device(op, "lengths", lengths, device);  // read by the kernel; values clamped to [0, S] there
  }
  check_shape(op, "lengths", lengths, {T});
  for (int64_t t = 0; device.is_cpu() && t < T; ++t) {
    check_arg(i32_at(lengths, t) >= 0 && i32_at(lengths, t) <= logits.size(1), op, "lengths",
              "hold values in [0, logits.size(1) = " + str(logits.size(1)) + "]",
              str(i32_at(lengths, t)) + " at index " + str(t));
  }
  check_defined(op, "out", out);
  check_dtype(op, "out", out, DType::i32);
  check_device(op, "out", out, device);
  check_dim(op, "out", out, 2);
  check_arg(out.size(0) == T && out.size(1) >= 1, op, "out", "have shape [" + str(T) + ", topk >= 1]", out.shape_str());
  check_last_dim_contiguous(op, "out", out);
  if (T == 0) return;
  detail::device_ops(device).topk_positions(logits, lengths, out, nullptr);
}

}  // namespace lattn
