// Host implementations of the latent-cache and attention-state ops (see
// src/cpu/ops_cpu.h). Plain loops over strided views: these run on
// validated arguments, so every index they compute is in bounds.
#include "cpu/ops_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/types/host_index.h"
#include "cpu/attention_kernels.h"
#include "lattn/cpu.h"

namespace lattn::cpu {
namespace {

using detail::index_at;

// Pointer to the first element of cache entry (block, offset).
char* cache_entry(const LatentCache& cache, int64_t block, int64_t offset) {
  const Tensor& d = cache.data;
  return static_cast<char*>(d.data()) + (block * d.stride(0) + offset * d.stride(1)) * d.element_size();
}

}  // namespace

void concat_and_cache_mla(const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                          const Tensor& slot_mapping) {
  const int64_t L = cache.kv_lora_rank, R = cache.qk_rope_head_dim;
  const int64_t block_size = cache.block_size();
  const DType cache_dtype = cache.dtype();
  // fp8 stores x / scale; f16/bf16 store x (rounded to the cache dtype).
  const bool quantize = cache.is_fp8();
  const int64_t num_tokens = slot_mapping.size(0);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = index_at(slot_mapping, t);
    if (slot < 0) continue;  // PAD_SLOT_ID: a padded token, nothing to cache
    void* entry = cache_entry(cache, slot / block_size, slot % block_size);
    const int64_t kv_row = t * kv_c.stride(0), pe_row = t * k_pe.stride(0);
    for (int64_t i = 0; i < L; ++i) {
      const float x = load_as_f32(kv_c.data(), kv_c.dtype(), kv_row + i);
      store_from_f32(entry, cache_dtype, i, quantize ? x / cache.scale : x);
    }
    for (int64_t i = 0; i < R; ++i) {
      const float x = load_as_f32(k_pe.data(), k_pe.dtype(), pe_row + i);
      store_from_f32(entry, cache_dtype, L + i, quantize ? x / cache.scale : x);
    }
  }
}

void gather_cache(const LatentCache& cache, const Tensor& dst, const Tensor& block_table, const Tensor& cu_seq_lens,
                  int batch_size, const Tensor& seq_starts) {
  const int64_t block_size = cache.block_size();
  const int64_t entry_dim = cache.entry_dim();
  const bool bitwise = dst.dtype() == cache.dtype();  // f16/bf16 into the same dtype: copy the bits
  const float scale = cache.is_fp8() ? cache.scale : 1.0f;
  for (int b = 0; b < batch_size; ++b) {
    const int64_t row0 = index_at(cu_seq_lens, b);
    const int64_t num_tokens = index_at(cu_seq_lens, b + 1) - row0;
    const int64_t first_block = seq_starts.defined() ? index_at(seq_starts, b) / block_size : 0;
    for (int64_t j = 0; j < num_tokens; ++j) {
      const int64_t block = index_at(block_table, b, first_block + j / block_size);
      const char* entry = cache_entry(cache, block, j % block_size);
      char* dst_row = static_cast<char*>(dst.data()) + (row0 + j) * dst.stride(0) * dst.element_size();
      if (bitwise) {
        std::memcpy(dst_row, entry, size_t(entry_dim) * size_t(dst.element_size()));
        continue;
      }
      for (int64_t i = 0; i < entry_dim; ++i) {
        store_from_f32(dst_row, dst.dtype(), i, load_as_f32(entry, cache.dtype(), i) * scale);
      }
    }
  }
}

void merge_attn_states(const Tensor& out, const Tensor& out_lse, const Tensor& prefix_out, const Tensor& prefix_lse,
                       const Tensor& suffix_out, const Tensor& suffix_lse) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const int64_t num_tokens = out.size(0), num_heads = out.size(1), head_dim = out.size(2);
  // Rows are converted with the CPU backend's vector kernels and tokens run
  // in parallel: a chunked prefill merges once per chunk, [T, N, V] each time.
  const KernelTable& kt = kernel_table(cpu_isa());
  const auto row = [](const Tensor& t, int64_t tok, int64_t h) {
    return static_cast<const char*>(t.data()) + (tok * t.stride(0) + h * t.stride(1)) * t.element_size();
  };
#pragma omp parallel
  {
    std::vector<float> pv(static_cast<size_t>(head_dim)), sv(static_cast<size_t>(head_dim));
    std::vector<float> ov(static_cast<size_t>(head_dim));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t h = 0; h < num_heads; ++h) {
        float p = prefix_lse.data_as<const float>()[h * prefix_lse.stride(0) + t * prefix_lse.stride(1)];
        float s = suffix_lse.data_as<const float>()[h * suffix_lse.stride(0) + t * suffix_lse.stride(1)];
        // FA2 reports an empty row as +inf, FA3 as -inf: both mean "attended to nothing".
        if (p == kInf) p = -kInf;
        if (s == kInf) s = -kInf;
        float lse = -kInf;
        std::fill(ov.begin(), ov.end(), 0.f);
        // A side is empty iff its LSE is -inf: it is not read at all, so
        // whatever it holds cannot leak. A NaN LSE (the side attended to a
        // NaN) makes the row NaN; a side whose weight underflows to 0 is still
        // read (0 * NaN stays NaN, as in the math). Both empty: 0 / -inf (the
        // plain formula would give 0/0 = NaN).
        const bool p_live = p != -kInf, s_live = s != -kInf;
        if (std::isnan(p) || std::isnan(s)) {
          std::fill(ov.begin(), ov.end(), std::numeric_limits<float>::quiet_NaN());
          lse = std::numeric_limits<float>::quiet_NaN();
        } else if (p_live || s_live) {
          // Scales first, then one multiply-add per element (arXiv:2501.01005 §2.2).
          const float m = std::max(p, s);
          const float pe = std::exp(p - m), se = std::exp(s - m);
          const float total = pe + se;
          const float p_scale = pe / total, s_scale = se / total;
          if (p_live) {
            kt.to_f32(row(prefix_out, t, h), prefix_out.dtype(), head_dim, pv.data());
            for (int64_t d = 0; d < head_dim; ++d) ov[size_t(d)] += pv[size_t(d)] * p_scale;
          }
          if (s_live) {
            kt.to_f32(row(suffix_out, t, h), suffix_out.dtype(), head_dim, sv.data());
            for (int64_t d = 0; d < head_dim; ++d) ov[size_t(d)] += sv[size_t(d)] * s_scale;
          }
          lse = std::log(total) + m;
        }
        kt.from_f32(ov.data(), head_dim, out.dtype(),
                    static_cast<char*>(out.data()) + (t * out.stride(0) + h * out.stride(1)) * out.element_size());
        if (out_lse.defined()) out_lse.data_as<float>()[h * out_lse.stride(0) + t * out_lse.stride(1)] = lse;
      }
    }
  }
}

void copy_cache_blocks(const LatentCache& src, const LatentCache& dst, const Tensor& block_mapping) {
  const size_t block_bytes = size_t(src.block_size() * src.entry_dim()) * size_t(src.data.element_size());
  for (int64_t i = 0; i < block_mapping.size(0); ++i) {
    const int64_t from = index_at(block_mapping, i, 0), to = index_at(block_mapping, i, 1);
    std::memmove(cache_entry(dst, to, 0), cache_entry(src, from, 0), block_bytes);
  }
}

void quantize_fp8(const Tensor& src, const Tensor& dst, float scale) {
  for (int64_t r = 0; r < src.size(0); ++r) {
    for (int64_t c = 0; c < src.size(1); ++c) {
      const float x = load_as_f32(src.data(), src.dtype(), r * src.stride(0) + c);
      store_from_f32(dst.data(), DType::fp8_e4m3, r * dst.stride(0) + c, x / scale);
    }
  }
}

}  // namespace lattn::cpu
