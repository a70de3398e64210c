// Combining the ranks' partial decode results under DCP (lattn/dcp.h,
// docs/dcp.md): the LSE correction of merge_attn_states, over any number of
// ranks, through a Communicator. This file decides which collective moves
// what; the local steps (mask, rescale, pack, merge, finish) are the device's
// (core/dcp/dcp_kernels.h), all ordered on one stream.
//
// all_gather_reduce_scatter (vLLM's):
//   mask_lse -> all_gather(LSE) -> rescale -> reduce_scatter(outputs by head)
//   [-> all_gather(head slices) for every head] -> finish
// all_to_all:
//   mask_lse -> pack_rows -> all_to_all((output, LSE) rows by head slice)
//   -> merge_rows [-> all_gather(slices, LSE slices) for every head] -> finish
// Every head with H not divisible by world_size (ag+rs only): the rescaled
// partials are all-gathered whole and finish adds them in rank order.
#include <string>

#include "core/dcp/dcp_kernels.h"
#include "core/ops/device_ops.h"
#include "lattn/check.h"
#include "lattn/dcp.h"
#include "lattn/errors.h"

namespace lattn {

Tensor DcpCombineScratch::get(int slot, std::initializer_list<int64_t> shape, DType dtype) {
  check_arg(slot >= 0 && slot < kSlots, "DcpCombineScratch::get", "slot", "be in [0, " + std::to_string(kSlots) + ")",
            std::to_string(slot));
  std::vector<int64_t> dims(shape);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  const size_t bytes = size_t(n) * size_t(dtype_size(dtype));
  Buffer& b = buffers_[size_t(slot)];
  if (b.size() < bytes) {
    b.reset();
    b = Buffer(bytes, device_);
  }
  return Tensor(b.data(), dtype, dims, device_);
}

size_t DcpCombineScratch::bytes_held() const {
  size_t n = 0;
  for (const Buffer& b : buffers_) n += b.size();
  return n;
}

namespace {

struct Shapes {
  int64_t T, H, D, Ho;
  int h0;  // first head of `out`
};

Shapes check_combine_args(const Communicator& comm, const Tensor& plan_row_empty,
                          const std::vector<int32_t>& plan_empty_rows, const Tensor& partial_out,
                          const Tensor& partial_lse, const Tensor& out, const Tensor& out_lse, DcpCombineMethod method,
                          const DcpCombineScratch* scratch) {
  static const char* op = "dcp_combine";
  const Device dev = comm.device();
  check_dim(op, "partial_out", partial_out, 3);
  check_dtype_in(op, "partial_out", partial_out, {DType::f32, DType::f16, DType::bf16});
  check_contiguous(op, "partial_out", partial_out);
  check_device(op, "partial_out", partial_out, dev);
  const int64_t T = partial_out.size(0), H = partial_out.size(1), D = partial_out.size(2);
  check_shape(op, "partial_lse", partial_lse, {H, T});
  check_dtype(op, "partial_lse", partial_lse, DType::f32);
  check_contiguous(op, "partial_lse", partial_lse);
  check_device(op, "partial_lse", partial_lse, dev);
  check_dim(op, "out", out, 3);
  check_dtype_in(op, "out", out, {DType::f32, DType::f16, DType::bf16});
  check_contiguous(op, "out", out);
  check_device(op, "out", out, dev);
  const int W = comm.world_size();
  const int64_t Ho = out.size(1);
  const bool full = Ho == H;
  const bool slice = W > 1 && H % W == 0 && Ho == H / W;
  check_arg(out.size(0) == T && out.size(2) == D && (full || slice), op, "out",
            "have shape [" + std::to_string(T) + ", " + std::to_string(H) + " (every head) or H / world_size, " +
                std::to_string(D) + "]",
            out.shape_str());
  if (method == DcpCombineMethod::all_to_all) {
    check_arg(H % W == 0, op, "partial_out",
              "have a head count divisible by world_size " + std::to_string(W) +
                  " for the all_to_all method (each rank merges H / world_size heads)",
              out.shape_str());
  }
  if (out_lse.defined()) {
    check_shape(op, "out_lse", out_lse, {Ho, T});
    check_dtype(op, "out_lse", out_lse, DType::f32);
    check_contiguous(op, "out_lse", out_lse);
    check_device(op, "out_lse", out_lse, dev);
  }
  if (plan_row_empty.defined()) {
    check_shape(op, "plan.row_empty", plan_row_empty, {T});
    check_device(op, "plan.row_empty", plan_row_empty, dev);
  }
  for (const int32_t row : plan_empty_rows) {
    check_arg(row >= 0 && row < T, op, "plan.empty_rows", "list rows in [0, " + std::to_string(T) + ")",
              std::to_string(row));
  }
  if (scratch)
    check_arg(scratch->device() == dev, op, "scratch", "be on " + device_name(dev), device_name(scratch->device()));
  return {T, H, D, Ho, full ? 0 : int(comm.rank() * Ho)};
}

enum Slot { kOwnLse, kLseAll, kScaled, kSummed, kLse, kRowEmpty };

}  // namespace

void dcp_combine(Communicator& comm, const DcpDecodePlan& plan, const Tensor& partial_out, const Tensor& partial_lse,
                 const Tensor& out, const Tensor& out_lse, DcpCombineMethod method, Stream stream,
                 DcpCombineScratch* scratch) {
  detail::dcp_combine_rows(comm, plan.row_empty.tensor(), plan.empty_rows, partial_out, partial_lse, out, out_lse,
                           method, stream, scratch);
}

void detail::dcp_combine_rows(Communicator& comm, const Tensor& plan_row_empty,
                              const std::vector<int32_t>& plan_empty_rows, const Tensor& partial_out,
                              const Tensor& partial_lse, const Tensor& out, const Tensor& out_lse,
                              DcpCombineMethod method, Stream stream, DcpCombineScratch* scratch) {
  const Shapes s = check_combine_args(comm, plan_row_empty, plan_empty_rows, partial_out, partial_lse, out, out_lse,
                                      method, scratch);
  const Device dev = comm.device();
  DcpCombineScratch temporaries(dev);
  DcpCombineScratch& ws = scratch ? *scratch : temporaries;
  const detail::DcpKernels& k = detail::dcp_kernels(dev);
  const int W = comm.world_size(), rank = comm.rank();
  const bool full = s.Ho == s.H;
  const int64_t Hs = s.H / W;  // head slice (meaningful when H % W == 0)

  // Which rows saw no key here: the plan's mask, or its list (uploaded).
  Tensor row_empty = plan_row_empty;
  if (!row_empty.defined() && !plan_empty_rows.empty()) {
    OwnedTensor host = OwnedTensor::zeros({s.T}, DType::u8);
    for (const int32_t row : plan_empty_rows) host.data_as<uint8_t>()[row] = 1;
    row_empty = ws.get(kRowEmpty, {s.T}, DType::u8);
    detail::device_ops(dev, Device::cpu())
        .memcpy(row_empty.data(), dev, host.data(), Device::cpu(), size_t(s.T), stream);
  }
  const Tensor own_lse = ws.get(kOwnLse, {s.H, s.T}, DType::f32);
  k.mask_lse(partial_lse, row_empty, own_lse, stream);

  if (method == DcpCombineMethod::all_to_all) {
    const Tensor send = ws.get(kScaled, {W, Hs, s.T, s.D + 1}, DType::f32);
    const Tensor recv = ws.get(kLseAll, {W, Hs, s.T, s.D + 1}, DType::f32);
    k.pack_rows(partial_out, own_lse, send, stream);
    comm.all_to_all(send, recv, stream);
    const Tensor merged = ws.get(kSummed, {1, Hs, s.T, s.D}, DType::f32);
    const Tensor lse = ws.get(kLse, {s.H, s.T}, DType::f32);
    const Tensor own_slice_lse = lse.narrow(0, rank * Hs, Hs);  // [Hs, T], contiguous
    k.merge_rows(recv, merged.view({Hs, s.T, s.D}), own_slice_lse, stream);
    if (!full) {
      k.finish(merged, own_slice_lse, out, out_lse, stream);
      return;
    }
    // Every head: gather the merged slices (head-major, so rank order = head order) and their LSEs.
    const Tensor all = ws.get(kScaled, {1, s.H, s.T, s.D}, DType::f32);  // send is no longer needed
    comm.all_gather(merged.view({Hs, s.T, s.D}), all.view({W, Hs, s.T, s.D}), stream);
    const Tensor lse_gathered = ws.get(kOwnLse, {s.H, s.T}, DType::f32);  // own_lse is no longer needed
    comm.all_gather(own_slice_lse, lse_gathered.view({W, Hs, s.T}), stream);
    k.finish(all, lse_gathered, out, out_lse, stream);
    return;
  }

  // all_gather_reduce_scatter: every rank learns every LSE, rescales its own
  // partial, and the rescaled partials are summed over ranks by head.
  const Tensor lse_all = ws.get(kLseAll, {W, s.H, s.T}, DType::f32);
  comm.all_gather(own_lse, lse_all, stream);
  const Tensor scaled = ws.get(kScaled, {s.H, s.T, s.D}, DType::f32);
  const Tensor lse = ws.get(kLse, {s.H, s.T}, DType::f32);
  k.rescale(partial_out, own_lse, lse_all, rank, scaled, lse, stream);
  if (full && s.H % W != 0) {
    // Head count not divisible: gather every rescaled partial, finish adds them in rank order.
    const Tensor all = ws.get(kSummed, {W, s.H, s.T, s.D}, DType::f32);
    comm.all_gather(scaled, all, stream);
    k.finish(all, lse, out, out_lse, stream);
    return;
  }
  const Tensor summed = ws.get(kSummed, {1, Hs, s.T, s.D}, DType::f32);
  comm.reduce_scatter_sum(scaled, summed.view({Hs, s.T, s.D}), stream);
  if (!full) {
    k.finish(summed, lse.narrow(0, s.h0, s.Ho), out, out_lse, stream);
    return;
  }
  // Every head: gather the summed slices back (rank order = head order). W = 1 needs no copy.
  if (W == 1) {
    k.finish(summed, lse, out, out_lse, stream);
    return;
  }
  const Tensor all = ws.get(kLseAll, {1, s.H, s.T, s.D}, DType::f32);  // lse_all is no longer needed
  comm.all_gather(summed.view({Hs, s.T, s.D}), all.view({W, Hs, s.T, s.D}), stream);
  k.finish(all, lse, out, out_lse, stream);
}

}  // namespace lattn
