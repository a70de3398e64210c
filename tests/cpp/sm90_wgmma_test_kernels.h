// tests/cpp/sm90_wgmma_test_kernels.h — launchers of the sm90 wrapper test
// kernels (sm90_wgmma_test_kernels.cu); plain C++ so the test is a .cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace lattn::test::sm90 {

enum class WgmmaCase { kSsKMajorB, kSsMnMajorB, kRsKMajorB, kRsMnMajorB };

// D[64][n] = A[64][128] * B, on one warpgroup: A row-major (K contiguous),
// B as [n][128] (K-major cases) or [128][n] (MN-major cases), host arrays of
// 16-bit patterns; A and B are loaded by TMA with the 128-byte swizzle (RS
// cases read A fragments from global memory into registers instead). d
// receives [64][n] floats, a_smem_raw the raw bytes of A's shared-memory tile
// (2 boxes of 64 x 64, 16 KB). n: 32, 64, 128 or 256 (MN-major: 64 and up,
// whole 64-wide boxes); bf16, else f16.
// Returns false (and does nothing) when the device is not sm90.
bool run_wgmma_case(WgmmaCase c, int n, bool bf16, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                    std::vector<float>& d, std::vector<uint8_t>& a_smem_raw);

// One TMA box {64, 64, 1} of a [blocks][block_size][576] 16-bit host tensor at
// (col0, row0, block) with the evict-first hint: raw shared-memory bytes
// (8 KB) to out. Returns false when the device is not sm90.
bool run_tma_3d_case(const std::vector<uint16_t>& cache, int blocks, int block_size, int col0, int row0, int block,
                     std::vector<uint8_t>& out);

}  // namespace lattn::test::sm90
