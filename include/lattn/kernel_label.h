// lattn/kernel_label.h — which kernels a backend runs, in words, for logs and
// reports (`lattn info`, `lattn run`, `lattn bench`, Python's
// MlaAttention.kernels).
//
// The labels of a backend instance (PrefillBackend::kernel_label(),
// DecodeBackend::kernel_label() in lattn/backend.h) are the precise ones: a
// CUDA decode instance reports the tile configuration and split-KV parts its
// last plan chose. The functions below answer without an instance.
#pragma once

#include <string>

#include "lattn/device.h"
#include "lattn/dtype.h"

namespace lattn {

// The `cpu` backend's kernels for activations of `dtype`, e.g.
//   "avx512bf16 kernels (best for this CPU); projections: bf16 vdpbf16ps GEMM"
//   "avx2 kernels (LATTN_CPU_ISA=avx2); projections: OpenBLAS sgemm"
// Throws ValueError when LATTN_CPU_ISA names an unknown path or one this CPU cannot run.
std::string cpu_kernel_label(DType dtype);

// A backend's kernels without an instance: the cpu label above for "cpu",
// the reference's plain loops for "reference"; for "cuda" and "hopper" the
// kernel family (their tile configuration and split count are chosen per
// layer and step: an instance's kernel_label() says which); for other
// (plug-in) backends their name.
std::string backend_kernel_label(const std::string& backend, Device device, DType dtype);

}  // namespace lattn
