// The CPU device-ops table (see core/ops/device_ops.h): host memory, the host
// ops of cpu/ops_cpu.h and the CPU GEMM.
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/ops/device_ops.h"
#include "cpu/gemm_paths.h"
#include "cpu/indexer_cpu.h"
#include "cpu/ops_cpu.h"
#include "cpu/sparse_cpu.h"
#include "lattn/errors.h"

namespace lattn::detail {
namespace {

void* host_malloc(size_t bytes, int) {
  // Large host buffers (latent caches, workspaces) are 2 MiB aligned and
  // asked for transparent huge pages: attention streams them in scattered
  // blocks, and with 4 KiB pages the TLB misses cost the CPU decode ~15%.
  // Without THP (or with it off) madvise fails harmlessly.
  constexpr size_t kHugePage = size_t(2) << 20;
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  // More than memory + swap can never be backed (Linux refuses such a
  // request too); asking would only trip sanitizers' allocation limits.
  // (Asked once: a syscall per allocation would tax every metadata build.)
  static const size_t backing = [] {
    struct sysinfo info {};
    return sysinfo(&info) == 0 ? (size_t(info.totalram) + info.totalswap) * info.mem_unit : SIZE_MAX;
  }();
  if (bytes > SIZE_MAX - align || bytes > backing) {
    throw OutOfMemoryError("Buffer: host allocation of " + std::to_string(bytes) + " bytes failed (this machine has " +
                           std::to_string(backing) + " bytes of memory and swap)");
  }
  const size_t rounded = (bytes + align - 1) / align * align;
  void* data = std::aligned_alloc(align, rounded);
  if (data && align == kHugePage) madvise(data, rounded, MADV_HUGEPAGE);
  if (!data)
    throw OutOfMemoryError("Buffer: host allocation of " + std::to_string(bytes) + " bytes failed (out of memory)");
  return data;
}

void host_memcpy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows, int,
                    Stream) {
  for (size_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
  }
}

}  // namespace

const DeviceOps& cpu_device_ops() {
  static const DeviceOps table = [] {
    DeviceOps t;
    t.name = "cpu";
    t.malloc = host_malloc;
    t.free = [](void* ptr, int) noexcept { std::free(ptr); };
    t.memcpy = [](void* dst, Device, const void* src, Device, size_t bytes, Stream) {
      if (bytes > 0) std::memcpy(dst, src, bytes);
    };
    t.memset = [](void* ptr, int byte, size_t bytes, int, Stream) {
      if (bytes > 0) std::memset(ptr, byte, bytes);
    };
    t.memcpy_2d = host_memcpy_2d;
    t.synchronize = [](Stream) {};
    t.query_devices = [] { return CudaDeviceQuery{{}, "the CPU table lists no CUDA devices"}; };
    t.concat_and_cache_mla = [](const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                                const Tensor& slot_mapping,
                                Stream) { cpu::concat_and_cache_mla(kv_c, k_pe, cache, slot_mapping); };
    t.gather_cache = [](const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                        const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts,
                        Stream) { cpu::gather_cache(cache, dst, block_table, cu_seq_lens, batch_size, seq_starts); };
    t.concat_and_cache_ds_mla = [](const Tensor& kv_c, const Tensor& k_pe, const LatentCache& cache,
                                   const Tensor& slot_mapping,
                                   Stream) { cpu::concat_and_cache_ds_mla(kv_c, k_pe, cache, slot_mapping); };
    t.gather_cache_ds_mla = [](const LatentCache& cache, const Tensor& dst, const Tensor& block_table,
                               const Tensor& cu_seq_lens, int batch_size, const Tensor& seq_starts, Stream) {
      cpu::gather_cache_ds_mla(cache, dst, block_table, cu_seq_lens, batch_size, seq_starts);
    };
    t.merge_attn_states = [](const Tensor& out, const Tensor& out_lse, const Tensor& prefix_out,
                             const Tensor& prefix_lse, const Tensor& suffix_out, const Tensor& suffix_lse, Stream) {
      cpu::merge_attn_states(out, out_lse, prefix_out, prefix_lse, suffix_out, suffix_lse);
    };
    t.copy_blocks = [](std::span<const LatentCache> caches, const Tensor& block_mapping, Stream) {
      for (const LatentCache& cache : caches) cpu::copy_cache_blocks(cache, cache, block_mapping);
    };
    t.swap_blocks = [](const LatentCache& src, const LatentCache& dst, const Tensor& block_mapping, Stream) {
      cpu::copy_cache_blocks(src, dst, block_mapping);
    };
    // advance_step stays nullptr: on the host, lattn's advance_step updates
    // the metadata's host arrays itself (core/metadata/advance_step.cpp).
    t.quantize_fp8 = [](const Tensor& src, const Tensor& dst, const Tensor& scale, Stream) {
      cpu::quantize_fp8(src, dst, *scale.data_as<const float>());
    };
    // sparse_mla stays nullptr: the host sparse classes (cpu, reference) compute themselves.
    t.indexer_k_cache_write = [](const Tensor& k, const IndexerKeyCache& cache, const Tensor& slot_mapping, Stream) {
      cpu::indexer_k_cache_write(k, cache, slot_mapping);
    };
    t.indexer_logits = cpu::indexer_logits;
    t.indexer_topk = cpu::indexer_topk;
    t.topk_positions = [](const Tensor& logits, const Tensor& lengths, const Tensor& out, Stream) {
      cpu::topk_positions(logits, lengths, out);
    };
    t.gemm = cpu_gemm;
    return t;
  }();
  return table;
}

}  // namespace lattn::detail
