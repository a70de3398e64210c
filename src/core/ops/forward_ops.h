// src/core/ops/forward_ops.h — the small device-dispatched data movements
// MlaAttention::forward needs besides GEMMs, attention and the public ops
// (internal), through the device-ops table (core/ops/device_ops.h).
#pragma once

#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn::detail {

// Writes k_pe into the rope columns of every head of k (the seed's
// k_pe.expand over heads): k[t, n, P:P+R] = k_pe[t, :].
//   k_pe [T, R]       rows may be strided, last dim contiguous
//   k    [T, N, P+R]  contiguous, same dtype as k_pe
void broadcast_k_pe(const Tensor& k_pe, const Tensor& k, Stream stream);

// Copies the first dst.size(-1) columns of each row: dst[t, n, :V] = src[t, n, :V].
//   src [T, N, Dsrc >= V] (last dim contiguous)   dst [T, N, V] (last dim contiguous), same dtype
void copy_leading_columns(const Tensor& src, const Tensor& dst, Stream stream);

// dst = fp8_e4m3(src / scale[0]).
//   src [rows, cols] f16/bf16/f32   dst [rows, cols] fp8_e4m3   scale [1] f32 (same device)
void quantize_fp8(const Tensor& src, const Tensor& dst, const Tensor& scale, Stream stream);

// Sets every element of a 2-dim tensor (rows may be strided) to zero.
void zero_rows(const Tensor& t, Stream stream);

}  // namespace lattn::detail
