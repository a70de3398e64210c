// lattn/mla_common_state.h — MlaCommonState, the per-runner attention state of vLLM's
// MLACommonState (docs/metadata.md): the context-chunk workspace, and the capture
// buffers a decode step is captured into and replayed from as a CUDA graph.
//
// Capture / replay protocol (V0 style):
//   auto capture = state.graph_capture(max_batch_size);   // allocates the buffers
//   for each captured batch size bs:
//     MlaMetadata m = state.graph_capture_get_metadata_for_batch(bs);
//     GraphInputBuffers in = state.get_graph_input_buffers(m);
//     ... capture the decode step with m ...
//   // replay: build the step's metadata padded to bs (MlaMetadataBuilder
//   // with CudaGraphConfig of the same max_blocks_per_seq), to_device, then
//   state.prepare_graph_input_buffers(in, step_metadata, false, stream);
//   // and copy slot_mapping into in.slot_mapping (the runner's job, as in the seed).
//
// The buffers live on config.device; on the CPU everything works on host
// memory (useful for tests and CPU graphs of other kinds).
#pragma once

#include <cstdint>
#include <memory>

#include "lattn/device.h"
#include "lattn/dtype.h"
#include "lattn/kv_cache_spec.h"
#include "lattn/metadata.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn {

struct MlaCommonStateConfig {
  Device device = Device::cpu();        // where capture buffers and workspace live (runner.device)
  int block_size = 16;                  // cache_config.block_size (tokens per block)
  int head_size = 576;                  // model_config.get_head_size(): kv_lora_rank + rope dim
  bool chunked_prefill_enabled = true;  // scheduler_config.chunked_prefill_enabled
  bool enable_prefix_caching = false;   // cache_config.enable_prefix_caching
  int64_t max_model_len = 0;            // model_config.max_model_len (workspace sizing; > 0 when chunking)
  int64_t max_num_seqs = 0;             // scheduler_config.max_num_seqs (workspace sizing; > 0 when chunking)
  int max_seq_len_to_capture = 0;       // runner.max_seq_len_to_capture (tokens), > 0
  int max_graph_batch_size = 0;         // rows of runner.graph_block_tables, > 0
  int max_blocks_per_seq = 0;           // its width; 0 = cdiv(max_seq_len_to_capture, block_size)

  // Sets block_size and head_size (the entry's L + R) from the cache's one
  // value (docs/metadata.md, "One KvCacheSpec").
  void set_kv_cache_spec(const KvCacheSpec& spec) {
    block_size = spec.block_size;
    head_size = spec.entry_dim();
  }
};

// Views of the captured step's input buffers (seed: the dict of
// get_graph_input_buffers), on the state's device.
struct GraphInputBuffers {
  Tensor slot_mapping;     // [batch_size] int64
  Tensor seq_lens_tensor;  // [batch_size] int32
  Tensor block_tables;     // [batch_size, max_blocks_per_seq] int32
};

class MlaCommonState {
 public:
  // Sizes the context workspace when chunked prefill or prefix caching is
  // enabled (mla_context_chunk_workspace_size: AssertionError when it is
  // below max_num_seqs * block_size). ValueError for invalid fields.
  explicit MlaCommonState(MlaCommonStateConfig config);
  MlaCommonState(const MlaCommonState&) = delete;
  MlaCommonState& operator=(const MlaCommonState&) = delete;

  const MlaCommonStateConfig& config() const { return config_; }
  // Rows of the gather workspace; 0 when neither chunking feature is enabled.
  int64_t context_chunk_workspace_size() const { return context_chunk_workspace_size_; }

  // The runner's persistent graph block tables: host int32
  // [max_graph_batch_size, max_blocks_per_seq], zero-initialized, written by the
  // runner; graph_capture uploads them as the captured block tables.
  Tensor graph_block_tables() const { return graph_block_tables_; }

  // The seed's graph_capture context manager: allocates the capture buffers
  // (slot_mapping PAD_SLOT_ID, seq_lens 1, block tables = graph_block_tables,
  // positions 0) for up to max_batch_size requests; the scope's end releases
  // them (metadata made from them keeps its storage alive).
  class GraphCapture {
   public:
    GraphCapture(GraphCapture&& other) noexcept : state_(other.state_) { other.state_ = nullptr; }
    GraphCapture& operator=(GraphCapture&&) = delete;
    ~GraphCapture();

   private:
    friend class MlaCommonState;
    explicit GraphCapture(MlaCommonState* state) : state_(state) {}
    MlaCommonState* state_;
  };
  // ValueError when max_batch_size is outside [1, max_graph_batch_size];
  // AssertionError when a capture is already active.
  [[nodiscard]] GraphCapture graph_capture(int max_batch_size);
  bool is_graph_capturing() const { return capturing_; }

  // A fresh state with the same configuration (seed: graph_clone; asserts capturing).
  std::unique_ptr<MlaCommonState> graph_clone(int batch_size) const;

  // Decode-only metadata over the first batch_size capture buffers:
  // num_decode_tokens = batch_size, slots PAD_SLOT_ID, seq_lens 1, max_query_len
  // 1, max_decode_seq_len = max_seq_len_to_capture, block tables = the first
  // batch_size rows. AssertionError outside graph_capture; ValueError for
  // batch_size outside [1, capture size]. is_encoder_decoder_model throws
  // NotImplementedError("MLACommonState does not support encoder/decoder yet").
  MlaMetadata graph_capture_get_metadata_for_batch(int batch_size, bool is_encoder_decoder_model = false);

  // {slot_mapping, decode seq_lens, decode block tables} of a captured
  // metadata; NotImplementedError("MLACommonState does not support encoder/decoder yet")
  // for encoder/decoder models.
  GraphInputBuffers get_graph_input_buffers(const MlaMetadata& metadata, bool is_encoder_decoder_model = false) const;

  // Replay: copies the step metadata's decode seq_lens and block tables into
  // the captured buffers (asynchronously on `stream` for CUDA). slot_mapping
  // is NOT copied (the runner's job, as in the seed). ValueError when the
  // shapes differ; then, as in the seed, NotImplementedError("TritonMLAState
  // does not support encoder/decoder yet") for encoder/decoder models.
  void prepare_graph_input_buffers(const GraphInputBuffers& input_buffers, const MlaMetadata& metadata,
                                   bool is_encoder_decoder_model = false, Stream stream = nullptr) const;

  // The capture positions buffer [max_batch_size] int64 (zeros); undefined
  // outside graph_capture.
  Tensor graph_positions() const;

  // Seed begin_forward: the context workspace [context_chunk_workspace_size,
  // head_size] of model_dtype on `device`, allocated on the first call (the
  // runner's device is only known then) and returned by every call, to be
  // attached to the step. Undefined when chunking is disabled. ValueError
  // when a later call asks for another device or dtype.
  Tensor begin_forward(Device device, DType model_dtype);

 private:
  void end_capture();

  MlaCommonStateConfig config_;
  int64_t context_chunk_workspace_size_ = 0;
  OwnedTensor graph_block_tables_;
  OwnedTensor context_chunk_workspace_;
  bool capturing_ = false;
  int capture_batch_size_ = 0;
  std::shared_ptr<detail::MetadataStorage> capture_;  // the capture buffers
  // Byte offsets of the capture sections.
  size_t slot_mapping_ = 0, seq_lens_ = 0, block_tables_ = 0, positions_ = 0;
  size_t query_start_loc_ = 0, seq_start_loc_ = 0, context_lens_ = 0;
};

}  // namespace lattn
