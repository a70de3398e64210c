// src/core/attention/workspace.h — scratch buffers owned by one MlaAttention (internal).
//
// Each named slot keeps one device allocation that only grows: after the
// largest step has been seen once (warm-up), every later step gets the same
// pointers, which is what CUDA-graph capture of a step needs.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>

#include "lattn/tensor.h"

namespace lattn::detail {

enum class WorkspaceSlot : int {
  decode_ql_nope,     // [Td, N, L]    absorbed decode queries
  decode_out,         // [Td, N, L]    decode attention output (latent)
  new_k,              // [Tp, N, P+R]  up-projected keys of the new tokens
  new_v,              // [Tp, N, V']   up-projected values (V' = V, or P+R when padded)
  new_out,            // [Tp, N, V']   new-token attention output (suffix)
  new_lse,            // [N, Tp]       its LSE
  context_latent,     // [ws, L+R]     gathered context chunk (activation dtype)
  context_k,          // [ws, N, P+R]  up-projected context keys
  context_v,          // [ws, N, V']   up-projected context values
  chunk_out,          // [Tp, N, V']   one chunk's output
  chunk_lse,          // [N, Tp]
  context_out,        // [Tp, N, V]    f32: running result of the chunk loop (new tokens + chunks so far)
  context_lse,        // [N, Tp]
  context_lse_next,   // [N, Tp]       merge target (an LSE may not alias its inputs)
  prefill_out,        // [Tp, N, V']   padded-V or quantized prefill output before the final copy
  sparse_q,           // [Tc, N, L+R]  a sparse layer's absorbed queries [q_nope·W_UK | q_pe]
  sparse_indices,     // [Tc, topk]    int32 slots the indexer picked
  output,             // [T, N*V]      the layer output when the caller gives none
  output_staging,     // [T, N*V]      activation-dtype output before fp8 quantization
  count
};

class Workspace {
 public:
  explicit Workspace(Device device = Device::cpu()) : device_(device) {}
  // A contiguous tensor of `shape` and `dtype` in `slot`, reusing the slot's
  // memory when it is large enough (contents are not preserved on growth).
  Tensor get(WorkspaceSlot slot, std::initializer_list<int64_t> shape, DType dtype);
  // Total bytes held (for tests of pointer stability and memory bounds).
  size_t bytes_held() const;

 private:
  Device device_;
  std::array<Buffer, size_t(WorkspaceSlot::count)> buffers_;
};

}  // namespace lattn::detail
