// The MLA metadata builder (see lattn/metadata.h): its configuration and
// public entry points. A build is two passes over the batch description
// (batch_inputs.h): validation and sizes (batch_validation.h), then one
// arena filled and cut into views (metadata_fill.h, metadata_views.h),
// following vLLM's MLACommonMetadataBuilder.build in v1 decodes-first order.
#include <algorithm>
#include <string>

#include "core/metadata/batch_inputs.h"
#include "core/metadata/batch_validation.h"
#include "core/metadata/graph_buffers.h"
#include "core/metadata/metadata_fill.h"
#include "core/types/batch_invariant.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "lattn/overflow.h"

namespace lattn {
namespace {

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::vector<int> default_capture_sizes(int max_batch_size) {
  std::vector<int> sizes;
  for (int s : {1, 2, 4}) {
    if (s < max_batch_size) sizes.push_back(s);
  }
  for (int s = 8; s < max_batch_size; s += 8) sizes.push_back(s);
  sizes.push_back(max_batch_size);
  return sizes;
}

}  // namespace

// ---- public -----------------------------------------------------------------------

std::vector<int> mla_supported_head_sizes() { return {576}; }

int64_t mla_context_chunk_workspace_size(int64_t max_model_len, int64_t max_num_seqs, int64_t block_size) {
  const std::string op = "mla_context_chunk_workspace_size: ";
  if (max_model_len <= 0) throw ValueError(op + "max_model_len must be > 0, got " + std::to_string(max_model_len));
  if (max_num_seqs <= 0) throw ValueError(op + "max_num_seqs must be > 0, got " + std::to_string(max_num_seqs));
  if (block_size <= 0) throw ValueError(op + "block_size must be > 0, got " + std::to_string(block_size));
  // Enough for 8 full-length requests or 4 pages per request, capped at
  // 128k tokens for long-context models (seed 002; its comment's "64k" is
  // stale, the code's 128 * 1024 is authoritative, docs/metadata.md).
  const int64_t seq_blocks = checked_mul(max_num_seqs, block_size, op + "max_num_seqs * block_size");
  const int64_t workspace = std::min(std::max(checked_mul(8, max_model_len, op + "8 * max_model_len"),
                                              checked_mul(4, seq_blocks, op + "4 * max_num_seqs * block_size")),
                                     int64_t(128) * 1024);
  if (workspace < seq_blocks) {
    throw AssertionError("context_chunk_workspace_size >= scheduler_config.max_num_seqs * cache_config.block_size (" +
                         std::to_string(workspace) + " < " + std::to_string(max_num_seqs) + " * " +
                         std::to_string(block_size) + " = " + std::to_string(max_num_seqs * block_size) + ")");
  }
  return workspace;
}

MlaMetadataBuilder::MlaMetadataBuilder(MetadataBuilderConfig config) : config_(std::move(config)) {
  const std::string op = "MlaMetadataBuilder: ";
  if (detail::batch_invariant_from_env()) config_.batch_invariant = true;
  const MetadataBuilderConfig& c = config_;
  if (c.block_size <= 0) throw ValueError(op + "block_size must be > 0, got " + std::to_string(c.block_size));
  if (c.reorder_batch_threshold < 1) {
    throw ValueError(op + "reorder_batch_threshold must be >= 1, got " + std::to_string(c.reorder_batch_threshold));
  }
  if (c.context_chunk_workspace_size < 0) {
    throw ValueError(op + "context_chunk_workspace_size must be >= 0, got " +
                     std::to_string(c.context_chunk_workspace_size));
  }
  if ((c.chunked_prefill_enabled || c.enable_prefix_caching) && c.context_chunk_workspace_size == 0) {
    throw ValueError(op +
                     "context_chunk_workspace_size must be > 0 when chunked_prefill_enabled or "
                     "enable_prefix_caching is set (size it with mla_context_chunk_workspace_size), got 0");
  }
  if (c.sliding_window && *c.sliding_window <= 0) {
    throw ValueError(op + "sliding_window must be > 0 when set, got " + std::to_string(*c.sliding_window));
  }
  if (c.head_dim) {
    const std::vector<int> supported = mla_supported_head_sizes();
    if (std::find(supported.begin(), supported.end(), *c.head_dim) == supported.end()) {
      // Seed text (docs/vllm.md); the seed builds it from two arguments, so Python
      // prints a tuple: this is the intended sentence.
      throw ValueError("Only [576] are supported for head_dim, received " + std::to_string(*c.head_dim) + ".");
    }
  }
  if (c.cudagraph) {
    CudaGraphConfig g = *c.cudagraph;
    if (g.max_batch_size <= 0) {
      throw ValueError(op + "cudagraph.max_batch_size must be > 0, got " + std::to_string(g.max_batch_size));
    }
    if (g.max_seq_len_to_capture <= 0) {
      throw ValueError(op + "cudagraph.max_seq_len_to_capture must be > 0, got " +
                       std::to_string(g.max_seq_len_to_capture));
    }
    if (g.max_blocks_per_seq < 0) {
      throw ValueError(op + "cudagraph.max_blocks_per_seq must be >= 0, got " + std::to_string(g.max_blocks_per_seq));
    }
    if (g.max_blocks_per_seq == 0) g.max_blocks_per_seq = int(cdiv(g.max_seq_len_to_capture, c.block_size));
    if (g.capture_sizes.empty()) g.capture_sizes = default_capture_sizes(g.max_batch_size);
    for (size_t i = 0; i < g.capture_sizes.size(); ++i) {
      const int s = g.capture_sizes[i];
      if (s < 1 || s > g.max_batch_size || (i > 0 && s <= g.capture_sizes[i - 1])) {
        throw ValueError(op + "cudagraph.capture_sizes must be strictly ascending within [1, max_batch_size " +
                         std::to_string(g.max_batch_size) + "]; entry " + std::to_string(i) + " is " +
                         std::to_string(s));
      }
    }
    config_.cudagraph = g;
    graph_ = detail::GraphBuffers::create(g);
  }
}

MlaMetadata MlaMetadataBuilder::build(std::span<const RequestSpec> requests, const BuildOptions& options) const {
  const detail::SpecBatch batch(requests);
  const detail::BatchPlan plan = detail::plan_batch(config_, graph_.get(), batch, options);
  return detail::fill_metadata(config_, graph_.get(), batch, options, plan);
}

MlaMetadata MlaMetadataBuilder::build(const CommonAttentionMetadata& common, int common_prefix_len,
                                      bool fast_build) const {
  return build(common, BuildOptions{}, common_prefix_len, fast_build);
}

MlaMetadata MlaMetadataBuilder::build(const CommonAttentionMetadata& common, const BuildOptions& options,
                                      int common_prefix_len, bool fast_build) const {
  const detail::CommonHostArrays host = detail::check_common(common);
  const detail::CommonBatch batch(common, host.block_table, host.slot_mapping);
  const detail::BatchPlan plan = detail::plan_batch(config_, graph_.get(), batch, options);
  return detail::fill_metadata(config_, graph_.get(), batch, options, plan);
}

bool MlaMetadataBuilder::reorder_batch(InputBatch& input_batch) const {
  return reorder_batch_to_split_decodes_and_prefills(input_batch, config_.reorder_batch_threshold);
}

bool MlaMetadataBuilder::can_run_in_cudagraph(const CommonAttentionMetadata& common) const {
  return common.max_query_len == 1;
}

MlaMetadata MlaMetadataBuilder::build_for_cudagraph_capture(const CommonAttentionMetadata& common) const {
  // Upstream MLA: capture is decode-only, one token per request.
  lattn_assert(common.num_reqs == common.num_actual_tokens,
               "MLA only supports decode-only full CUDAGraph capture. Make sure all cudagraph capture sizes <= "
               "max_num_seq. (num_reqs " +
                   std::to_string(common.num_reqs) + ", num_actual_tokens " + std::to_string(common.num_actual_tokens) +
                   ")");
  CommonAttentionMetadata decode_only = common;
  decode_only.max_query_len = 1;
  BuildOptions options;
  if (graph_) options.cudagraph_batch_size = common.num_reqs;
  return build(decode_only, options, 0, false);
}

bool MlaMetadataBuilder::use_cascade_attention(int, std::span<const int32_t>, int, int, bool, bool, int) const {
  return false;
}

std::optional<int> MlaMetadataBuilder::padded_batch_size(int num_reqs) const {
  if (!graph_ || num_reqs < 1) return std::nullopt;
  for (int s : config_.cudagraph->capture_sizes) {
    if (s >= num_reqs) return s;
  }
  return std::nullopt;
}

MlaMetadata MlaMetadataBuilder::build_for_cudagraph(std::span<const RequestSpec> requests,
                                                    std::optional<int> batch_size) const {
  if (!graph_) throw ValueError("MlaMetadataBuilder.build_for_cudagraph: MetadataBuilderConfig::cudagraph is not set");
  BuildOptions options;
  options.cudagraph_batch_size = batch_size ? batch_size : padded_batch_size(int(requests.size()));
  if (!options.cudagraph_batch_size) {
    throw ValueError("MlaMetadataBuilder.build_for_cudagraph: " + std::to_string(requests.size()) +
                     " requests exceed the largest captured batch size " +
                     std::to_string(config_.cudagraph->capture_sizes.back()));
  }
  return build(requests, options);
}

}  // namespace lattn
