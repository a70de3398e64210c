// lattn/stream.h — the CUDA stream type, without including CUDA headers.
//
// cudaStream_t is `struct CUstream_st*`; naming the same struct here keeps
// public headers framework-free while staying type-compatible with CUDA code
// (a cudaStream_t converts to lattn::Stream with no cast). nullptr is the
// legacy default stream on CUDA devices and means "synchronous" on the CPU.
#pragma once

struct CUstream_st;

namespace lattn {
using Stream = CUstream_st*;
}  // namespace lattn
