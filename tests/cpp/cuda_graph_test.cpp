// CUDA-graph support: MLACommonState capture buffers (TV_GRAPH), replay
// copies, the seed's NotImplementedError texts, the builder's padded
// pointer-stable builds, can_run_in_cudagraph and build_for_cudagraph_capture.
// Runs on the host (the state works on host memory when its device is the CPU).
#include <gtest/gtest.h>

#include <vector>

#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "lattn/mla_common_state.h"
#include "support/metadata_test_util.h"

namespace lattn {
namespace {

using test::to_rows;
using test::to_vec;
using Vec = std::vector<int64_t>;
using Rows = std::vector<std::vector<int64_t>>;

MlaCommonStateConfig state_config() {
  MlaCommonStateConfig c;
  c.block_size = 4;
  c.max_model_len = 4096;
  c.max_num_seqs = 128;
  c.max_seq_len_to_capture = 32;  // 8 blocks per row
  c.max_graph_batch_size = 16;
  return c;
}

template <class E, class F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception of the expected type)";
}

TEST(CudaGraph, TV_GRAPH) {
  MlaCommonState state(state_config());
  // The runner's persistent graph block tables: row i = [10 i, 10 i + 1, ...].
  int32_t* table = state.graph_block_tables().data_as<int32_t>();
  for (int r = 0; r < 16; ++r) {
    for (int j = 0; j < 8; ++j) table[r * 8 + j] = 10 * r + j;
  }
  EXPECT_NE(error_text<AssertionError>([&] {
              state.graph_capture_get_metadata_for_batch(4);
            }).find("self._is_graph_capturing"),
            std::string::npos);
  {
    auto capture = state.graph_capture(8);
    EXPECT_TRUE(state.is_graph_capturing());
    const MlaMetadata m = state.graph_capture_get_metadata_for_batch(4);
    EXPECT_EQ(m.num_decode_tokens, 4);
    EXPECT_EQ(m.num_prefills, 0);
    EXPECT_EQ(m.num_prefill_tokens, 0);
    EXPECT_TRUE(m.use_cuda_graph);
    EXPECT_EQ(to_vec(m.slot_mapping_cpu), Vec(4, -1));
    EXPECT_EQ(to_vec(m.seq_lens_cpu), Vec(4, 1));
    EXPECT_EQ(m.max_query_len, 1);
    EXPECT_EQ(m.max_decode_query_len, 1);
    EXPECT_EQ(m.max_prefill_seq_len, 0);
    EXPECT_EQ(m.max_decode_seq_len, 32);  // max_seq_len_to_capture
    ASSERT_NE(m.decode_metadata(), nullptr);
    EXPECT_EQ(m.decode->max_decode_seq_len, 32);
    const Rows rows = to_rows(m.block_table_cpu);
    ASSERT_EQ(rows.size(), 4u);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(rows[size_t(r)][0], 10 * r);
    EXPECT_EQ(to_vec(state.graph_positions()), Vec(8, 0));

    EXPECT_EQ(error_text<NotImplementedError>([&] { state.graph_capture_get_metadata_for_batch(4, true); }),
              "MLACommonState does not support encoder/decoder yet");
    EXPECT_EQ(error_text<NotImplementedError>([&] { state.get_graph_input_buffers(m, true); }),
              "MLACommonState does not support encoder/decoder yet");
    EXPECT_THROW(state.graph_capture_get_metadata_for_batch(9), ValueError);
    EXPECT_THROW(state.graph_capture(8), AssertionError);  // nested
    const std::unique_ptr<MlaCommonState> clone = state.graph_clone(4);
    EXPECT_FALSE(clone->is_graph_capturing());
    EXPECT_EQ(clone->context_chunk_workspace_size(), state.context_chunk_workspace_size());
  }
  EXPECT_FALSE(state.is_graph_capturing());
  EXPECT_FALSE(state.graph_positions().defined());
  EXPECT_THROW(state.graph_clone(4), AssertionError);
  EXPECT_THROW(state.graph_capture(17), ValueError);
}

TEST(CudaGraph, ReplayCopiesIntoCapturedBuffers) {
  MlaCommonState state(state_config());
  auto capture = state.graph_capture(8);
  const MlaMetadata captured = state.graph_capture_get_metadata_for_batch(4);
  const GraphInputBuffers in = state.get_graph_input_buffers(captured);
  EXPECT_EQ(in.slot_mapping.data(), captured.slot_mapping.data());
  EXPECT_EQ(in.seq_lens_tensor.data(), captured.decode->seq_lens.data());
  EXPECT_EQ(in.block_tables.data(), captured.decode->block_table.data());

  // A step of 3 decodes padded to 4 with the same block-table width (8).
  MetadataBuilderConfig c;
  c.block_size = 4;
  c.context_chunk_workspace_size = 64;
  c.cudagraph = CudaGraphConfig{16, 32, 0, {}};
  const MlaMetadataBuilder builder(c);
  const std::vector<RequestSpec> reqs = {{1, 5, {3, 4}}, {1, 0, {7}}, {1, 10, {1, 2, 9}}};
  const MlaMetadata step = builder.build_for_cudagraph(reqs);
  ASSERT_EQ(step.num_reqs, 4);
  state.prepare_graph_input_buffers(in, step);
  EXPECT_EQ(to_vec(captured.seq_lens_cpu), (Vec{6, 1, 11, 1}));
  const Rows rows = to_rows(captured.block_table_cpu);
  EXPECT_EQ(Vec(rows[0].begin(), rows[0].begin() + 2), (Vec{3, 4}));
  EXPECT_EQ(Vec(rows[2].begin(), rows[2].begin() + 3), (Vec{1, 2, 9}));
  EXPECT_EQ(rows[3][0], 0);  // padded row: block 0
  // Slots are the runner's to copy; untouched here.
  EXPECT_EQ(to_vec(captured.slot_mapping_cpu), Vec(4, -1));

  // Encoder/decoder: the seed copies first, then raises with "TritonMLAState".
  EXPECT_EQ(error_text<NotImplementedError>([&] { state.prepare_graph_input_buffers(in, step, true); }),
            "TritonMLAState does not support encoder/decoder yet");

  // A step of another padded size is refused, nothing copied.
  const std::vector<RequestSpec> two = {{1, 1, {5}}, {1, 1, {6}}};
  const MlaMetadata other = builder.build_for_cudagraph(two);
  EXPECT_THROW(state.prepare_graph_input_buffers(in, other), ValueError);
  EXPECT_EQ(to_vec(captured.seq_lens_cpu), (Vec{6, 1, 11, 1}));
}

TEST(CudaGraph, StateWorkspace) {
  MlaCommonState state(state_config());
  EXPECT_EQ(state.context_chunk_workspace_size(), 32768);  // min(max(8*4096, 4*128*4), 131072)
  const Tensor ws = state.begin_forward(Device::cpu(), DType::bf16);
  EXPECT_EQ(ws.shape_str(), "[32768, 576]");
  EXPECT_EQ(state.begin_forward(Device::cpu(), DType::bf16).data(), ws.data());  // allocated once
  EXPECT_THROW(state.begin_forward(Device::cpu(), DType::f16), ValueError);

  MlaCommonStateConfig off = state_config();
  off.chunked_prefill_enabled = false;
  off.enable_prefix_caching = false;
  MlaCommonState no_chunking(off);
  EXPECT_EQ(no_chunking.context_chunk_workspace_size(), 0);
  EXPECT_FALSE(no_chunking.begin_forward(Device::cpu(), DType::bf16).defined());

  MlaCommonStateConfig tight = state_config();
  tight.max_model_len = 512;
  tight.max_num_seqs = 4096;
  tight.block_size = 64;
  EXPECT_THROW(MlaCommonState{tight}, AssertionError);  // TV-WS's failing row
}

TEST(CudaGraph, PaddedBuildsArePointerStableAndValidated) {
  MetadataBuilderConfig c;
  c.block_size = 4;
  c.context_chunk_workspace_size = 64;
  c.cudagraph = CudaGraphConfig{20, 16, 0, {}};
  const MlaMetadataBuilder builder(c);
  // Default capture sizes: 1, 2, 4, 8, 16, then max_batch_size 20.
  EXPECT_EQ(builder.config().cudagraph->capture_sizes, (std::vector<int>{1, 2, 4, 8, 16, 20}));
  EXPECT_EQ(builder.padded_batch_size(3), 4);
  EXPECT_EQ(builder.padded_batch_size(17), 20);
  EXPECT_EQ(builder.padded_batch_size(21), std::nullopt);
  EXPECT_EQ(builder.config().cudagraph->max_blocks_per_seq, 4);

  const std::vector<RequestSpec> a_reqs = {{1, 5, {3, 4}}, {1, 0, {7}}, {1, 10, {1, 2, 9}}};
  const MlaMetadata a = builder.build_for_cudagraph(a_reqs);
  const Vec a_slots = to_vec(a.slot_mapping_cpu);
  EXPECT_EQ(a_slots, (Vec{4 * 4 + 1, 7 * 4 + 0, 9 * 4 + 2, -1}));
  EXPECT_EQ(to_vec(a.query_start_loc_cpu), (Vec{0, 1, 2, 3, 4}));
  EXPECT_EQ(to_vec(a.seq_lens_cpu), (Vec{6, 1, 11, 1}));
  EXPECT_EQ(a.block_table_cpu.size(1), 4);
  EXPECT_EQ(a.num_decodes, 4);
  EXPECT_EQ(a.decode->num_decodes, 4);
  EXPECT_EQ(a.prefill_metadata(), nullptr);

  const std::vector<RequestSpec> b_reqs = {{1, 2, {5}}, {1, 7, {6, 8}}};
  const MlaMetadata b = builder.build_for_cudagraph(b_reqs);
  EXPECT_EQ(b.slot_mapping_cpu.data(), a.slot_mapping_cpu.data());  // the same persistent buffers
  EXPECT_EQ(b.block_table_cpu.data(), a.block_table_cpu.data());
  EXPECT_EQ(b.storage, a.storage);
  EXPECT_EQ(to_vec(b.seq_lens_cpu), (Vec{3, 8}));

  // Refusals: prefills, s_q > 1, too many requests, rows longer than the graph's width.
  const std::vector<RequestSpec> mixed = {{1, 2, {5}}, {4, 0, {6}}};
  EXPECT_NE(error_text<ValueError>([&] { builder.build_for_cudagraph(mixed); }).find("request 1 has query_len 4"),
            std::string::npos);
  const std::vector<RequestSpec> too_long = {{1, 40, std::vector<int32_t>(11, 1)}};
  EXPECT_NE(error_text<ValueError>([&] { builder.build_for_cudagraph(too_long); }).find("max_blocks_per_seq 4"),
            std::string::npos);
  const std::vector<RequestSpec> many(21, RequestSpec{1, 0, {0}});
  EXPECT_THROW(builder.build_for_cudagraph(many), ValueError);
  BuildOptions options;
  options.cudagraph_batch_size = 2;
  const std::vector<RequestSpec> three(3, RequestSpec{1, 0, {0}});
  EXPECT_THROW(builder.build(three, options), ValueError);  // batch_size below num_reqs
  MetadataBuilderConfig plain;
  plain.context_chunk_workspace_size = 64;
  EXPECT_THROW(MlaMetadataBuilder(plain).build(three, options), ValueError);  // no CudaGraphConfig
  // The persistent buffers still hold b after the refusals.
  EXPECT_EQ(to_vec(b.seq_lens_cpu), (Vec{3, 8}));

  MetadataBuilderConfig bad = c;
  bad.cudagraph->capture_sizes = {4, 2};
  EXPECT_THROW(MlaMetadataBuilder{bad}, ValueError);
}

TEST(CudaGraph, CanRunAndCaptureBuildFromCommonMetadata) {
  MetadataBuilderConfig c;
  c.block_size = 4;
  c.context_chunk_workspace_size = 64;
  c.cudagraph = CudaGraphConfig{8, 16, 0, {}};
  const MlaMetadataBuilder builder(c);
  EXPECT_TRUE(MlaMetadataBuilder::full_cudagraph_supported);

  const std::vector<RequestSpec> decodes = {{1, 5, {3, 4}}, {1, 0, {7}}};
  test::CommonMetadataArrays d = test::make_common(decodes, 4, 4, 8);
  EXPECT_TRUE(builder.can_run_in_cudagraph(d.common));
  const MlaMetadata m = builder.build_for_cudagraph_capture(d.common);
  EXPECT_TRUE(m.use_cuda_graph);
  EXPECT_EQ(m.num_reqs, 2);
  EXPECT_EQ(to_vec(m.slot_mapping_cpu), (Vec{17, 28}));  // the first num_actual_tokens of the runner's 8

  const std::vector<RequestSpec> mixed = {{1, 5, {3, 4}}, {3, 0, {7}}};
  test::CommonMetadataArrays x = test::make_common(mixed, 4);
  EXPECT_FALSE(builder.can_run_in_cudagraph(x.common));
  EXPECT_NE(error_text<AssertionError>([&] {
              builder.build_for_cudagraph_capture(x.common);
            }).find("MLA only supports decode-only full CUDAGraph capture"),
            std::string::npos);
  // Cascade attention is never used by MLA.
  const std::vector<int32_t> query_lens = {1, 3};
  EXPECT_FALSE(builder.use_cascade_attention(128, query_lens, 16, 1, false, false, 132));
}

TEST(CudaGraph, CaptureBuffersOnTheGpu) {
  if (query_cuda_devices().devices.empty()) GTEST_SKIP() << "no CUDA device";
  MlaCommonStateConfig sc = state_config();
  sc.device = Device::cuda(0);
  MlaCommonState state(sc);
  auto capture = state.graph_capture(8);
  const MlaMetadata captured = state.graph_capture_get_metadata_for_batch(4);
  EXPECT_TRUE(captured.slot_mapping.device().is_cuda());
  const GraphInputBuffers in = state.get_graph_input_buffers(captured);
  auto back = [](const Tensor& t) {
    OwnedTensor host = OwnedTensor::empty(t.shape(), t.dtype());
    copy_tensor(t, host);
    return host.tensor().dim() == 1 ? to_vec(host.tensor()) : to_vec(host.tensor().view({-1}));
  };
  EXPECT_EQ(back(in.slot_mapping), Vec(4, -1));
  EXPECT_EQ(back(in.seq_lens_tensor), Vec(4, 1));

  MetadataBuilderConfig c;
  c.block_size = 4;
  c.context_chunk_workspace_size = 64;
  c.cudagraph = CudaGraphConfig{16, 32, 0, {}};
  const MlaMetadataBuilder builder(c);
  const std::vector<RequestSpec> reqs = {{1, 5, {3, 4}}, {1, 0, {7}}, {1, 10, {1, 2, 9}}};
  MlaMetadata step = builder.build_for_cudagraph(reqs);
  step.to_device(Device::cuda(0));
  state.prepare_graph_input_buffers(in, step);
  EXPECT_EQ(back(in.seq_lens_tensor), (Vec{6, 1, 11, 1}));
  const Vec table = back(in.block_tables);
  EXPECT_EQ(table[0], 3);
  EXPECT_EQ(table[1], 4);
  EXPECT_EQ(table[16], 1);
}

}  // namespace
}  // namespace lattn
