// lattn/dcp.h — decode context parallelism (DCP): the latent cache of every
// request sharded over the ranks of a group, token-interleaved (docs/dcp.md).
//
// Token position p of a request lives on rank (p / interleave) % world_size,
// at that rank's local position (p / (interleave * world_size)) * interleave
// + p % interleave (vLLM's cp_kv_cache_interleave_size; 1 = round robin).
// Each rank keeps its own cache and its own block tables over LOCAL positions.
//
// One decode step under DCP:
//   1. the engine gives every rank the same query rows (all heads it wants
//      combined: for vLLM-style DCP the query heads are all-gathered first);
//   2. build_dcp_decode_metadata() plans the rank's part: one single-token
//      row per query token, each attending to the rank's keys at global
//      positions <= its own (causal by GLOBAL position, also for s_q > 1), and
//      the slot of the new token only where this rank owns it (PAD elsewhere,
//      so concat_and_cache_mla keeps only the rank's tokens);
//   3. the rank's decode backend writes a partial output and LSE;
//   4. dcp_combine() merges the partials of all ranks with the LSE correction
//      (the math of merge_attn_states) through a Communicator, writing either
//      every head or this rank's slice of heads.
// A rank whose shard holds no key for a row contributes LSE -inf and nothing
// else: empty shards never produce NaN.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "lattn/communicator.h"
#include "lattn/metadata.h"
#include "lattn/tensor.h"

namespace lattn {

struct DcpConfig {
  int world_size = 1;  // ranks sharing each request's cache
  int rank = 0;        // this rank, in [0, world_size)
  int interleave = 1;  // consecutive tokens per rank before moving to the next (>= 1)
  // ValueError naming the field when world_size < 1, rank outside [0, world_size)
  // or interleave < 1.
  void validate() const;
};

// Rank holding global token position `pos` (>= 0).
int dcp_owner(const DcpConfig& dcp, int64_t pos);
// Local position of global position `pos` on its owner.
int64_t dcp_local_position(const DcpConfig& dcp, int64_t pos);
// Tokens among global positions [0, n) that live on dcp.rank.
int64_t dcp_local_count(const DcpConfig& dcp, int64_t n);

// This rank's part of a batch (build_dcp_decode_metadata: decodes only;
// build_dcp_metadata: decodes and prefills).
struct DcpDecodePlan {
  MlaMetadata metadata;             // the rank-local plan (run the decode backend with its decode view)
  std::vector<int32_t> empty_rows;  // decode rows that see no key on this rank (their backend output is ignored)
  OwnedTensor row_empty;            // [decode rows] u8 on the plan's device: 1 for the rows of empty_rows
                                    // (what dcp_combine reads; left undefined, empty_rows is read)
  // Some prefill of the batch has cached context (on some rank): every rank
  // then attends over its share of that context and the ranks combine their
  // partial results (a collective, so the flag is the same on every rank).
  bool prefill_has_context = false;
};

// Plans this rank's part of a decode-only batch.
//   requests: the batch in global terms (query_len = s_q, num_computed_tokens =
//     global context length), with block_table over this rank's LOCAL positions
//     (it must cover dcp_local_count(seq_len) tokens).
// The metadata has one decode row per query token (sum of query_len rows, in
// the same token order), seq_lens = the rank's visible keys for that token,
// slot_mapping = the token's local slot when this rank owns it, else
// PAD_SLOT_ID. Backends need seq_len >= 1, so a row with no visible key reads
// one arbitrary slot of the cache and is listed in empty_rows: dcp_combine
// gives it weight 0. Built by `builder` (its block size), moved to `device`.
// ValueError for prefill rows (query_len above the builder's reorder
// threshold): plan those with build_dcp_metadata.
DcpDecodePlan build_dcp_decode_metadata(const MlaMetadataBuilder& builder, const std::vector<RequestSpec>& requests,
                                        const DcpConfig& dcp, Device device = Device::cpu(), Stream stream = nullptr);

// Plans this rank's part of a mixed batch (decodes first, then prefills, in
// global terms as above; block tables over LOCAL positions covering
// dcp_local_count(seq_len) tokens). Decode requests become rows as in
// build_dcp_decode_metadata. A prefill request with global context c and
// query_len q becomes one rank-local prefill over its share of the context:
// num_computed_tokens = dcp_local_count(c) (its chunk plan gathers only the
// rank's context tokens, within the builder's workspace), the q new tokens
// (global positions c .. c+q-1) with their local slot where this rank owns
// them and PAD_SLOT_ID elsewhere. The layer's forward attends the new tokens
// causally among themselves on every rank, attends them to the rank's share
// of the context with LSE, combines those partials over the group and merges
// the two (docs/dcp.md, "Prefill with cached context").
DcpDecodePlan build_dcp_metadata(const MlaMetadataBuilder& builder, const std::vector<RequestSpec>& requests,
                                 const DcpConfig& dcp, Device device = Device::cpu(), Stream stream = nullptr);

// How dcp_combine moves the partials.
enum class DcpCombineMethod {
  all_gather_reduce_scatter,  // vLLM's: all-gather LSE, rescale locally, reduce-scatter the outputs over heads
  all_to_all,                 // one all-to-all of (output, LSE) rows by head slice, then a local merge
};

// Scratch memory of dcp_combine on one device. Buffers only grow, so after
// the largest step every call reuses the same memory and a device combine
// allocates (and synchronizes) nothing. One combine at a time per scratch.
class DcpCombineScratch {
 public:
  static constexpr int kSlots = 6;
  explicit DcpCombineScratch(Device device = Device::cpu()) : device_(device) {}
  Device device() const { return device_; }
  // A contiguous tensor of `shape` in slot `slot` (contents not preserved on growth).
  Tensor get(int slot, std::initializer_list<int64_t> shape, DType dtype);
  size_t bytes_held() const;

 private:
  Device device_;
  std::array<Buffer, kSlots> buffers_;
};

// Merges the partial results of all ranks.
//   partial_out [T, H, D] f32, this rank's partial output (normalized by its own softmax sum)
//   partial_lse [H, T]    f32, natural log, -inf where this rank saw no key
//   plan        this rank's plan: its empty_rows are read as LSE -inf whatever the backend wrote
//   out         [T, H, D] (every head) or [T, H / world, D] (heads [rank*H/w, (rank+1)*H/w));
//               f32, f16 or bf16; H must divide by world_size for the slice form
//   out_lse     [H or H/world, T] f32, optional (may be undefined)
//   stream      orders the work on a GPU (ignored on the host)
//   scratch     on comm.device(); nullptr = temporaries of this call (on a
//               GPU their release synchronizes the device: pass a scratch
//               for a combine without host synchronization)
// out and out_lse may be partial_out and partial_lse themselves (the
// partials are read before anything is written).
// Every tensor lives on comm.device(): host tensors with the in-process
// communicator, device tensors with NCCL (or the in-process communicator of
// one device). Every rank calls it. The all_to_all method with every head
// in `out` needs H divisible by world_size (one all-to-all, then an
// all-gather of the merged head slices).
void dcp_combine(Communicator& comm, const DcpDecodePlan& plan, const Tensor& partial_out, const Tensor& partial_lse,
                 const Tensor& out, const Tensor& out_lse,
                 DcpCombineMethod method = DcpCombineMethod::all_gather_reduce_scatter, Stream stream = nullptr,
                 DcpCombineScratch* scratch = nullptr);

}  // namespace lattn
