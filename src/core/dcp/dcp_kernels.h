// src/core/dcp/dcp_kernels.h — the local steps of dcp_combine (internal),
// one table per device kind, so the combine's orchestration (which
// collective moves what, src/core/dcp/dcp_combine.cpp) is written once:
//   dcp_host_kernels()  src/core/dcp/dcp_kernels_host.cpp
//   dcp_cuda_kernels()  src/cuda/comm/dcp_kernels.cu, or in a build without
//                       CUDA src/cuda/absent/dcp_kernels_absent.cpp (refuses)
//
// Every step computes, for each (head h, token t) over the W ranks' LSEs:
//   lse = log Σ_r exp(lse_r)  (ranks with lse_r = -inf skipped; +inf read as -inf)
//   w_r = exp(lse_r - lse), exactly 0 for a rank with lse_r = ±inf or lse = -inf
// and adds w_r · out_r only where w_r != 0, so an empty shard's output is
// never read; a NaN LSE makes the row NaN. Shapes (contiguous; f32 unless said):
#pragma once

#include <vector>

#include "lattn/dcp.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn::detail {

struct DcpKernels {
  //   partial_lse [H, T], row_empty [T] u8 or undefined, own_lse [H, T]:
  //   own_lse = partial_lse with the rows marked in row_empty set to -inf
  void (*mask_lse)(const Tensor& partial_lse, const Tensor& row_empty, const Tensor& own_lse, Stream stream) = nullptr;
  //   partial_out [T, H, D] f32/f16/bf16, own_lse [H, T], lse_all [W, H, T] (rank r's own_lse at r),
  //   scaled [H, T, D] = w_rank · partial_out (head-major), lse [H, T] = the combined LSE
  void (*rescale)(const Tensor& partial_out, const Tensor& own_lse, const Tensor& lse_all, int rank,
                  const Tensor& scaled, const Tensor& lse, Stream stream) = nullptr;
  //   partial_out [T, H, D], own_lse [H, T], send [W, H / W, T, D + 1]: destination j gets
  //   heads [j·H/W, (j+1)·H/W), each row D outputs then the LSE
  void (*pack_rows)(const Tensor& partial_out, const Tensor& own_lse, const Tensor& send, Stream stream) = nullptr;
  //   recv [W, Hs, T, D + 1] (rank r's rows at r), merged [Hs, T, D], lse [Hs, T]
  void (*merge_rows)(const Tensor& recv, const Tensor& merged, const Tensor& lse, Stream stream) = nullptr;
  //   summed [n, Ho, T, D]: out [T, Ho, D] (f32/f16/bf16) = Σ_i summed[i] in order i = 0..n-1;
  //   lse [Ho, T] copied to out_lse [Ho, T] when out_lse is defined
  void (*finish)(const Tensor& summed, const Tensor& lse, const Tensor& out, const Tensor& out_lse,
                 Stream stream) = nullptr;
  //   lse [any shape] f32 contiguous: every element set to -inf (an attention
  //   state that saw no key yet: merge_attn_states never reads its output)
  void (*fill_neg_inf)(const Tensor& lse, Stream stream) = nullptr;
};

// dcp_combine (lattn/dcp.h) with the rows to ignore given directly: row_empty
// [T] u8 on comm.device() or undefined, and/or empty_rows (host list); for a
// combine that is not a decode plan's (the DCP prefill's context partials,
// whose empty rows already carry LSE -inf).
void dcp_combine_rows(Communicator& comm, const Tensor& row_empty, const std::vector<int32_t>& empty_rows,
                      const Tensor& partial_out, const Tensor& partial_lse, const Tensor& out, const Tensor& out_lse,
                      DcpCombineMethod method, Stream stream, DcpCombineScratch* scratch);

const DcpKernels& dcp_host_kernels();
const DcpKernels& dcp_cuda_kernels();
inline const DcpKernels& dcp_kernels(Device device) {
  return device.is_cuda() ? dcp_cuda_kernels() : dcp_host_kernels();
}

}  // namespace lattn::detail
