// MLACommonState: workspace sizing and CUDA-graph capture buffers (see
// lattn/mla_common_state.h).
#include "lattn/mla_common_state.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>

#include "core/metadata/metadata_storage.h"
#include "core/metadata/metadata_views.h"
#include "core/ops/device_ops.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

const char* kEncoderDecoder = "MLACommonState does not support encoder/decoder yet";
// The seed's prepare_graph_input_buffers names another class (docs/vllm.md).
const char* kEncoderDecoderTriton = "TritonMLAState does not support encoder/decoder yet";

// Copies a contiguous tensor into another of the same shape, any devices.
void copy_into(const char* what, const Tensor& src, const Tensor& dst, Stream stream) {
  if (src.dtype() != dst.dtype() || src.dim() != dst.dim() ||
      !std::equal(src.shape().begin(), src.shape().end(), dst.shape().begin()) || !src.is_contiguous() ||
      !dst.is_contiguous()) {
    throw ValueError(std::string("prepare_graph_input_buffers: ") + what + " of the step metadata " + src.describe() +
                     " does not match the captured buffer " + dst.describe());
  }
  if (src.nbytes() == 0) return;
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    std::memmove(dst.data(), src.data(), src.nbytes());
  } else {
    detail::device_ops(dst.device(), src.device())
        .memcpy(dst.data(), dst.device(), src.data(), src.device(), src.nbytes(), stream);
  }
}

}  // namespace

MlaCommonState::MlaCommonState(MlaCommonStateConfig config) : config_(config) {
  const std::string op = "MlaCommonState: ";
  MlaCommonStateConfig& c = config_;
  if (c.block_size <= 0) throw ValueError(op + "block_size must be > 0, got " + std::to_string(c.block_size));
  if (c.head_size <= 0) throw ValueError(op + "head_size must be > 0, got " + std::to_string(c.head_size));
  if (c.max_seq_len_to_capture <= 0) {
    throw ValueError(op + "max_seq_len_to_capture must be > 0, got " + std::to_string(c.max_seq_len_to_capture));
  }
  if (c.max_graph_batch_size <= 0) {
    throw ValueError(op + "max_graph_batch_size must be > 0, got " + std::to_string(c.max_graph_batch_size));
  }
  if (c.max_blocks_per_seq < 0) {
    throw ValueError(op + "max_blocks_per_seq must be >= 0, got " + std::to_string(c.max_blocks_per_seq));
  }
  if (c.max_blocks_per_seq == 0) c.max_blocks_per_seq = (c.max_seq_len_to_capture + c.block_size - 1) / c.block_size;
  if (c.chunked_prefill_enabled || c.enable_prefix_caching) {
    context_chunk_workspace_size_ = mla_context_chunk_workspace_size(c.max_model_len, c.max_num_seqs, c.block_size);
  }
  graph_block_tables_ = OwnedTensor::zeros({c.max_graph_batch_size, c.max_blocks_per_seq}, DType::i32);
}

MlaCommonState::GraphCapture::~GraphCapture() {
  if (state_) state_->end_capture();
}

MlaCommonState::GraphCapture MlaCommonState::graph_capture(int max_batch_size) {
  lattn_assert(!capturing_, "graph_capture: a capture is already active (self._is_graph_capturing)");
  if (max_batch_size < 1 || max_batch_size > config_.max_graph_batch_size) {
    throw ValueError("graph_capture: max_batch_size must be in [1, max_graph_batch_size " +
                     std::to_string(config_.max_graph_batch_size) + "], got " + std::to_string(max_batch_size));
  }
  const size_t rows = size_t(max_batch_size);
  const size_t width = size_t(config_.max_blocks_per_seq);
  detail::ArenaLayout layout;
  slot_mapping_ = layout.add(rows, 8);
  positions_ = layout.add(rows, 8);
  seq_lens_ = layout.add(rows, 4);
  query_start_loc_ = layout.add(rows + 1, 4);
  seq_start_loc_ = layout.add(rows + 1, 4);
  context_lens_ = layout.add(rows, 4);
  block_tables_ = layout.add(rows * width, 4);
  auto storage = std::make_shared<detail::MetadataStorage>();
  storage->host = Buffer(layout.total(), Device::cpu());
  storage->upload_ranges = {{0, layout.total()}};
  std::byte* base = storage->host_base();
  std::fill_n(reinterpret_cast<int64_t*>(base + slot_mapping_), rows, PAD_SLOT_ID);
  std::fill_n(reinterpret_cast<int64_t*>(base + positions_), rows, int64_t(0));
  std::fill_n(reinterpret_cast<int32_t*>(base + seq_lens_), rows, 1);
  // One token per request of seq_len 1: both cumulative arrays are 0, 1, 2, ...
  std::iota(reinterpret_cast<int32_t*>(base + query_start_loc_),
            reinterpret_cast<int32_t*>(base + query_start_loc_) + rows + 1, 0);
  std::iota(reinterpret_cast<int32_t*>(base + seq_start_loc_),
            reinterpret_cast<int32_t*>(base + seq_start_loc_) + rows + 1, 0);
  std::fill_n(reinterpret_cast<int32_t*>(base + context_lens_), rows, 0);
  std::memcpy(base + block_tables_, graph_block_tables_.data(), rows * width * 4);
  if (config_.device.is_cuda()) {
    storage->device = Buffer(layout.total(), config_.device);
    detail::device_ops(config_.device)
        .memcpy(storage->device.data(), config_.device, storage->host.data(), Device::cpu(), layout.total(), nullptr);
  }
  capture_ = std::move(storage);
  capture_batch_size_ = max_batch_size;
  capturing_ = true;
  return GraphCapture(this);
}

void MlaCommonState::end_capture() {
  capturing_ = false;
  capture_batch_size_ = 0;
  capture_.reset();
}

std::unique_ptr<MlaCommonState> MlaCommonState::graph_clone(int batch_size) const {
  lattn_assert(capturing_, "self._is_graph_capturing (graph_clone is only valid inside graph_capture())");
  return std::make_unique<MlaCommonState>(config_);
}

MlaMetadata MlaCommonState::graph_capture_get_metadata_for_batch(int batch_size, bool is_encoder_decoder_model) {
  lattn_assert(capturing_,
               "self._is_graph_capturing (graph_capture_get_metadata_for_batch is only valid inside graph_capture())");
  if (batch_size < 1 || batch_size > capture_batch_size_) {
    throw ValueError("graph_capture_get_metadata_for_batch: batch_size must be in [1, " +
                     std::to_string(capture_batch_size_) + "] (the graph_capture max_batch_size), got " +
                     std::to_string(batch_size));
  }
  const detail::MetadataStorage& s = *capture_;
  const int64_t bs = batch_size;
  using detail::arena_view;
  MlaMetadata m;
  m.num_reqs = batch_size;
  m.num_actual_tokens = batch_size;
  m.num_decodes = batch_size;
  m.num_decode_tokens = batch_size;
  m.max_query_len = 1;
  m.max_decode_query_len = 1;
  m.max_prefill_seq_len = 0;
  m.max_decode_seq_len = config_.max_seq_len_to_capture;
  m.block_size = config_.block_size;
  m.use_cuda_graph = true;
  m.context_chunk_workspace_size = context_chunk_workspace_size_;
  m.slot_mapping_cpu = arena_view(s, slot_mapping_, DType::i64, {bs});
  m.seq_lens_cpu = arena_view(s, seq_lens_, DType::i32, {bs});
  m.query_start_loc_cpu = arena_view(s, query_start_loc_, DType::i32, {bs + 1});
  m.seq_start_loc_cpu = arena_view(s, seq_start_loc_, DType::i32, {bs + 1});
  m.context_lens_cpu = arena_view(s, context_lens_, DType::i32, {bs});
  m.block_table_cpu = arena_view(s, block_tables_, DType::i32, {bs, config_.max_blocks_per_seq});
  m.decode = detail::make_decode_view(m);
  m.storage = capture_;
  // The device buffers were filled once by graph_capture: bind, never re-upload
  // (replays write them through prepare_graph_input_buffers).
  detail::bind_device_views(m, config_.device);
  if (is_encoder_decoder_model) throw NotImplementedError(kEncoderDecoder);
  return m;
}

GraphInputBuffers MlaCommonState::get_graph_input_buffers(const MlaMetadata& metadata,
                                                          bool is_encoder_decoder_model) const {
  if (!metadata.decode) {
    throw ValueError("get_graph_input_buffers: the metadata has no decode view (num_decodes == 0)");
  }
  GraphInputBuffers buffers{metadata.slot_mapping, metadata.decode->seq_lens, metadata.decode->block_table};
  if (is_encoder_decoder_model) throw NotImplementedError(kEncoderDecoder);
  return buffers;
}

void MlaCommonState::prepare_graph_input_buffers(const GraphInputBuffers& input_buffers, const MlaMetadata& metadata,
                                                 bool is_encoder_decoder_model, Stream stream) const {
  if (!metadata.decode) {
    throw ValueError("prepare_graph_input_buffers: the metadata has no decode view (num_decodes == 0)");
  }
  const DecodeMetadata& d = *metadata.decode;
  // Check both before copying either.
  for (auto [what, src, dst] : {std::tuple{"seq_lens", d.seq_lens, input_buffers.seq_lens_tensor},
                                std::tuple{"block_tables", d.block_table, input_buffers.block_tables}}) {
    if (!src.defined() || !dst.defined() || src.dim() != dst.dim() ||
        !std::equal(src.shape().begin(), src.shape().end(), dst.shape().begin())) {
      throw ValueError(std::string("prepare_graph_input_buffers: ") + what + " of the step metadata " +
                       (src.defined() ? src.describe() : "(none)") + " does not match the captured buffer " +
                       (dst.defined() ? dst.describe() : "(none)"));
    }
  }
  copy_into("seq_lens", d.seq_lens, input_buffers.seq_lens_tensor, stream);
  copy_into("block_tables", d.block_table, input_buffers.block_tables, stream);
  if (is_encoder_decoder_model) throw NotImplementedError(kEncoderDecoderTriton);
}

Tensor MlaCommonState::graph_positions() const {
  if (!capturing_) return {};
  const Tensor host = detail::arena_view(*capture_, positions_, DType::i64, {capture_batch_size_});
  if (!config_.device.is_cuda()) return host;
  return Tensor(static_cast<std::byte*>(capture_->device.data()) + positions_, DType::i64, host.shape(), host.strides(),
                config_.device);
}

Tensor MlaCommonState::begin_forward(Device device, DType model_dtype) {
  if (context_chunk_workspace_size_ == 0) return {};
  const Tensor& existing = context_chunk_workspace_.tensor();
  if (!existing.defined()) {
    context_chunk_workspace_ =
        OwnedTensor::empty({context_chunk_workspace_size_, config_.head_size}, model_dtype, device);
  } else if (!(existing.device() == device) || existing.dtype() != model_dtype) {
    throw ValueError("begin_forward: the context workspace was allocated as " + existing.describe() +
                     "; a step now asks for " + dtype_name(model_dtype) + " on " + device_name(device));
  }
  return context_chunk_workspace_;
}

}  // namespace lattn
