// MlaMetadata::to_device and the CommonAttentionMetadata constructor (see
// lattn/metadata.h, lattn/common_metadata.h).
#include "lattn/metadata.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/metadata/metadata_storage.h"
#include "core/metadata/view_pairs.h"
#include "core/ops/device_ops.h"
#include "lattn/check.h"
#include "lattn/errors.h"

namespace lattn {
namespace detail {
namespace {

// The one list of the (X_cpu, X) pairs; M is MlaMetadata or const MlaMetadata.
template <class Pair, class M>
std::vector<Pair> list_view_pairs(M& m) {
  std::vector<Pair> v = {{"metadata.query_start_loc", &m.query_start_loc_cpu, &m.query_start_loc},
                         {"metadata.seq_start_loc", &m.seq_start_loc_cpu, &m.seq_start_loc},
                         {"metadata.seq_lens", &m.seq_lens_cpu, &m.seq_lens},
                         {"metadata.context_lens", &m.context_lens_cpu, &m.context_lens},
                         {"metadata.block_table", &m.block_table_cpu, &m.block_table},
                         {"metadata.slot_mapping", &m.slot_mapping_cpu, &m.slot_mapping}};
  if (m.decode) {
    auto& d = *m.decode;
    v.insert(v.end(), {{"metadata.decode.query_start_loc", &d.query_start_loc_cpu, &d.query_start_loc},
                       {"metadata.decode.seq_lens", &d.seq_lens_cpu, &d.seq_lens},
                       {"metadata.decode.seq_start_loc", &d.seq_start_loc_cpu, &d.seq_start_loc},
                       {"metadata.decode.block_table", &d.block_table_cpu, &d.block_table},
                       {"metadata.decode.slot_mapping", &d.slot_mapping_cpu, &d.slot_mapping}});
  }
  if (m.prefill) {
    auto& p = *m.prefill;
    v.insert(v.end(), {{"metadata.prefill.query_start_loc", &p.query_start_loc_cpu, &p.query_start_loc},
                       {"metadata.prefill.seq_lens", &p.seq_lens_cpu, &p.seq_lens},
                       {"metadata.prefill.context_lens", &p.context_lens_cpu, &p.context_lens},
                       {"metadata.prefill.seq_start_loc", &p.seq_start_loc_cpu, &p.seq_start_loc},
                       {"metadata.prefill.block_table", &p.block_table_cpu, &p.block_table},
                       {"metadata.prefill.slot_mapping", &p.slot_mapping_cpu, &p.slot_mapping},
                       {"metadata.prefill.chunks.starts", &p.chunks.starts_cpu, &p.chunks.starts},
                       {"metadata.prefill.chunks.cu_seq_lens", &p.chunks.cu_seq_lens_cpu, &p.chunks.cu_seq_lens}});
  }
  return v;
}

}  // namespace

std::vector<ViewPair> view_pairs(MlaMetadata& m) { return list_view_pairs<ViewPair>(m); }
std::vector<ConstViewPair> view_pairs(const MlaMetadata& m) { return list_view_pairs<ConstViewPair>(m); }

void check_view_pair(const char* op, const ConstViewPair& pair, Device device) {
  const std::string arg = std::string(pair.name) + " (device copy)";
  const Tensor& host = *pair.host;
  const Tensor& copy = *pair.device;
  check_defined(op, arg.c_str(), copy);
  check_device(op, arg.c_str(), copy, device);
  check_dtype(op, arg.c_str(), copy, host.dtype());
  check_arg(std::equal(copy.shape().begin(), copy.shape().end(), host.shape().begin(), host.shape().end()), op,
            arg.c_str(), "have the host copy's shape " + host.shape_str(), copy.shape_str());
}

void bind_device_views(MlaMetadata& m, Device target) {
  if (target.is_cpu()) {
    for (const ViewPair& pair : view_pairs(m)) *pair.device = *pair.host;
    m.device = target;
    return;
  }
  std::byte* const host_base = m.storage->host_base();
  std::byte* const device_base = static_cast<std::byte*>(m.storage->device.data());
  for (const ViewPair& pair : view_pairs(m)) {
    const Tensor& host = *pair.host;
    if (!host.defined()) continue;
    std::byte* p = device_base + (static_cast<std::byte*>(host.data()) - host_base);
    *pair.device = Tensor(p, host.dtype(), host.shape(), host.strides(), target);
  }
  m.device = target;
}

}  // namespace detail

void MlaMetadata::to_device(Device target, Stream stream) {
  if (!storage) {
    throw ValueError("MlaMetadata::to_device: this metadata has no storage (it was not made by MlaMetadataBuilder)");
  }
  detail::MetadataStorage& s = *storage;
  if (target.is_cpu()) {
    detail::bind_device_views(*this, target);
    return;
  }
  if (s.device.data() && !(s.device.device() == target)) {
    throw ValueError("MlaMetadata::to_device: the metadata already lives on " + device_name(s.device.device()) +
                     ", cannot also move it to " + device_name(target));
  }
  if (!s.device.data() && s.host.size() > 0) s.device = Buffer(s.host.size(), target);
  for (const detail::ByteRange& r : s.upload_ranges) {
    if (r.bytes == 0) continue;
    detail::device_ops(target).memcpy(static_cast<std::byte*>(s.device.data()) + r.offset, target,
                                      s.host_base() + r.offset, Device::cpu(), r.bytes, stream);
  }
  detail::bind_device_views(*this, target);
}

CommonAttentionMetadata::CommonAttentionMetadata(Tensor query_start_loc_, Tensor query_start_loc_cpu_, Tensor seq_lens_,
                                                 Tensor seq_lens_cpu_, Tensor num_computed_tokens_cpu_, int num_reqs_,
                                                 int num_actual_tokens_, int max_query_len_, Tensor block_table_tensor_,
                                                 Tensor slot_mapping_)
    : query_start_loc(query_start_loc_),
      query_start_loc_cpu(query_start_loc_cpu_),
      seq_lens(seq_lens_),
      seq_lens_cpu(seq_lens_cpu_),
      num_computed_tokens_cpu(num_computed_tokens_cpu_),
      num_reqs(num_reqs_),
      num_actual_tokens(num_actual_tokens_),
      max_query_len(max_query_len_),
      block_table_tensor(block_table_tensor_),
      slot_mapping(slot_mapping_) {
  const std::string op = "CommonAttentionMetadata: ";
  if (num_reqs < 0) throw ValueError(op + "num_reqs must be >= 0, got " + std::to_string(num_reqs));
  if (num_actual_tokens < 0) {
    throw ValueError(op + "num_actual_tokens must be >= 0, got " + std::to_string(num_actual_tokens));
  }
  if (max_query_len < 0) throw ValueError(op + "max_query_len must be >= 0, got " + std::to_string(max_query_len));
  if (!slot_mapping.defined() || slot_mapping.dtype() != DType::i64 || slot_mapping.dim() != 1 ||
      slot_mapping.size(0) < num_actual_tokens) {
    throw ValueError(op + "argument 'slot_mapping' must be a 1-D int64 tensor of at least num_actual_tokens = " +
                     std::to_string(num_actual_tokens) + " entries, got " +
                     (slot_mapping.defined() ? slot_mapping.describe() : std::string("no tensor")));
  }
  // __post_init__: slots past the real tokens are padding (full-CUDA-graph
  // cache writes must skip them). All bits set is -1 in two's complement.
  const int64_t tail = slot_mapping.size(0) - num_actual_tokens;
  if (tail > 0) fill_bytes(slot_mapping.narrow(0, num_actual_tokens, tail), 0xff);
}

}  // namespace lattn
