// Decode context parallelism: where each token lives, and the rank-local
// plan of a step: decodes, and prefills over the rank's share of their
// context (lattn/dcp.h, docs/dcp.md).
#include <algorithm>
#include <string>

#include "lattn/check.h"
#include "lattn/dcp.h"
#include "lattn/errors.h"

namespace lattn {

void DcpConfig::validate() const {
  check_arg(world_size >= 1, "DcpConfig", "world_size", "be >= 1", std::to_string(world_size));
  check_arg(rank >= 0 && rank < world_size, "DcpConfig", "rank", "be in [0, " + std::to_string(world_size) + ")",
            std::to_string(rank));
  check_arg(interleave >= 1, "DcpConfig", "interleave", "be >= 1", std::to_string(interleave));
}

int dcp_owner(const DcpConfig& dcp, int64_t pos) { return int((pos / dcp.interleave) % dcp.world_size); }

int64_t dcp_local_position(const DcpConfig& dcp, int64_t pos) {
  const int64_t cycle = int64_t(dcp.interleave) * dcp.world_size;  // tokens of one round over all ranks
  return (pos / cycle) * dcp.interleave + pos % dcp.interleave;
}

int64_t dcp_local_count(const DcpConfig& dcp, int64_t n) {
  const int64_t cycle = int64_t(dcp.interleave) * dcp.world_size;
  const int64_t rem = n % cycle;  // positions of the last, partial round
  const int64_t mine = std::clamp<int64_t>(rem - int64_t(dcp.rank) * dcp.interleave, 0, dcp.interleave);
  return (n / cycle) * dcp.interleave + mine;
}

namespace {

// The local slot of global position `pos` when this rank owns it, else PAD_SLOT_ID.
//   block_table: the request's LOCAL block table
int64_t owned_slot(const DcpConfig& dcp, const std::vector<int32_t>& block_table, int block_size, int64_t pos) {
  if (dcp_owner(dcp, pos) != dcp.rank) return PAD_SLOT_ID;
  const int64_t lp = dcp_local_position(dcp, pos);
  return int64_t(block_table[size_t(lp / block_size)]) * block_size + lp % block_size;
}

DcpDecodePlan build_plan(const char* op, bool allow_prefill, const MlaMetadataBuilder& builder,
                         const std::vector<RequestSpec>& requests, const DcpConfig& dcp, Device device, Stream stream) {
  dcp.validate();
  const int block_size = builder.config().block_size;
  const int threshold = builder.config().reorder_batch_threshold;

  DcpDecodePlan plan;
  std::vector<RequestSpec> rows;
  std::vector<int64_t> slots;  // per token row: the new token's local slot, or PAD_SLOT_ID
  int decode_rows = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    const RequestSpec& req = requests[r];
    const std::string where = "requests[" + std::to_string(r) + "]";
    if (!allow_prefill) {
      check_arg(req.query_len >= 1 && req.query_len <= threshold, op, (where + ".query_len").c_str(),
                "be a decode (1.." + std::to_string(threshold) + " tokens; plan prefills with build_dcp_metadata)",
                std::to_string(req.query_len));
    }
    check_arg(req.query_len >= 1, op, (where + ".query_len").c_str(), "be >= 1", std::to_string(req.query_len));
    check_arg(req.num_computed_tokens >= 0, op, (where + ".num_computed_tokens").c_str(), "be >= 0",
              std::to_string(req.num_computed_tokens));
    const int64_t context = req.num_computed_tokens;
    const int64_t seq_len = context + req.query_len;
    const int64_t local_len = dcp_local_count(dcp, seq_len);
    const int64_t blocks_needed = (local_len + block_size - 1) / block_size;
    check_arg(int64_t(req.block_table.size()) >= blocks_needed, op, (where + ".block_table").c_str(),
              "have >= " + std::to_string(blocks_needed) + " local blocks (" + std::to_string(local_len) +
                  " of its tokens live on rank " + std::to_string(dcp.rank) + ")",
              std::to_string(req.block_table.size()) + " blocks");

    if (req.query_len > threshold) {
      // A prefill: the rank's share of the context, then the new tokens. The
      // builder puts the new tokens after the local context and wants the
      // table to cover local context + query_len; only the rank's own new
      // tokens are written (their slots are set below) and only the local
      // context is gathered, so the padding entries are never read: they
      // repeat the last real block (a valid id).
      const int64_t local_context = dcp_local_count(dcp, context);
      RequestSpec row{
          .query_len = req.query_len, .num_computed_tokens = int32_t(local_context), .block_table = req.block_table};
      const size_t cover = size_t((local_context + req.query_len + block_size - 1) / block_size);
      const int32_t pad = row.block_table.empty() ? 0 : row.block_table.back();
      if (row.block_table.size() < cover) row.block_table.resize(cover, pad);
      for (int j = 0; j < req.query_len; ++j)
        slots.push_back(owned_slot(dcp, req.block_table, block_size, context + j));
      if (context > 0) plan.prefill_has_context = true;
      rows.push_back(std::move(row));
      continue;
    }
    // A decode: one single-token row per query token; token j sits at global
    // position context + j and sees this rank's keys at global positions <= its own.
    for (int j = 0; j < req.query_len; ++j) {
      const int64_t pos = context + j;
      const auto keys = int32_t(dcp_local_count(dcp, pos + 1));
      // A row with no local key still needs seq_len >= 1 for the backends: it
      // reads the first slot of its table (or of block 0), whatever that holds,
      // and dcp_combine gives it weight 0 (plan.empty_rows).
      if (keys == 0) plan.empty_rows.push_back(decode_rows);
      slots.push_back(owned_slot(dcp, req.block_table, block_size, pos));
      RequestSpec row{.query_len = 1, .num_computed_tokens = std::max(keys - 1, 0), .block_table = req.block_table};
      if (row.block_table.empty()) row.block_table = {0};
      rows.push_back(std::move(row));
      ++decode_rows;
    }
  }

  plan.metadata = builder.build(rows);
  // The builder put each new token at its row's local position; only the
  // rank that owns the token keeps it (the decode and prefill views'
  // slot_mapping are views of this array, docs/metadata.md).
  auto* slot_out = plan.metadata.slot_mapping_cpu.data_as<int64_t>();
  for (size_t i = 0; i < slots.size(); ++i) slot_out[i] = slots[i];
  if (device.is_cuda()) plan.metadata.to_device(device, stream);
  if (decode_rows == 0) return plan;  // no decode rows: nothing for the decode combine to mask
  OwnedTensor row_empty = OwnedTensor::zeros({int64_t(decode_rows)}, DType::u8);
  for (const int32_t row : plan.empty_rows) row_empty.data_as<uint8_t>()[row] = 1;
  if (device.is_cuda()) {
    plan.row_empty = OwnedTensor::empty({int64_t(decode_rows)}, DType::u8, device);
    copy_tensor(row_empty, plan.row_empty);
  } else {
    plan.row_empty = std::move(row_empty);
  }
  return plan;
}

}  // namespace

DcpDecodePlan build_dcp_decode_metadata(const MlaMetadataBuilder& builder, const std::vector<RequestSpec>& requests,
                                        const DcpConfig& dcp, Device device, Stream stream) {
  return build_plan("build_dcp_decode_metadata", false, builder, requests, dcp, device, stream);
}

DcpDecodePlan build_dcp_metadata(const MlaMetadataBuilder& builder, const std::vector<RequestSpec>& requests,
                                 const DcpConfig& dcp, Device device, Stream stream) {
  return build_plan("build_dcp_metadata", true, builder, requests, dcp, device, stream);
}

}  // namespace lattn
