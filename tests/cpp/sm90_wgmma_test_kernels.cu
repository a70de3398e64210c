// GPU kernels for sm90_wgmma_test.cpp: each drives one combination of the
// Hopper wrappers (src/cuda/sm90/common) on one warpgroup.
#include "sm90_wgmma_test_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>

#include "cuda/common/cuda_check.h"
#include "cuda/sm90/common/mbarrier.cuh"
#include "cuda/sm90/common/tma.cuh"
#include "cuda/sm90/common/tma_host.h"
#include "cuda/sm90/common/warpgroup.cuh"
#include "cuda/sm90/common/wgmma.cuh"

namespace lattn::test::sm90 {
namespace {

using namespace lattn::cuda::sm90;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LATTN_SM90A_BODY 1
#endif

constexpr int kK = 128;  // two 64-wide boxes

// Waits for the barrier's phase, giving up after ~2^26 probes: a copy that
// never lands fails the test (error flag) instead of hanging it.
#ifdef LATTN_SM90A_BODY
__device__ bool wait_bounded(uint64_t* bar, uint32_t parity) {
  for (int i = 0; i < (1 << 26); ++i) {
    if (mbarrier_try_wait(bar, parity)) return true;
  }
  return false;
}
#endif

template <int kN, bool kBf16, bool kBMn, bool kRs>
__global__ void __launch_bounds__(128, 1)
    wgmma_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                 const uint16_t* a_global, float* d_out, uint8_t* a_raw) {
#ifdef LATTN_SM90A_BODY
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* a_s = smem;                 // 2 boxes [64][64]
  uint8_t* b_s = smem + 2 * 64 * 128;  // K-major: 2 boxes [n][64]; MN-major: n/64 boxes [128][64]
  __shared__ uint64_t bar;
  const int t = threadIdx.x;
  if (t == 0) {
    mbarrier_init(&bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  constexpr uint32_t kBytes = 64 * kK * 2 + kN * kK * 2;
  if (t == 0) {
    tma_prefetch_descriptor(&a_map);
    mbarrier_arrive_expect_tx(&bar, kBytes);
    tma_load_2d(a_s, &a_map, &bar, 0, 0);
    tma_load_2d(a_s + 8192, &a_map, &bar, 64, 0);
    if constexpr (kBMn) {
      for (int j = 0; j < kN / 64; ++j) tma_load_2d(b_s + j * kK * 128, &b_map, &bar, 64 * j, 0);
    } else {
      tma_load_2d(b_s, &b_map, &bar, 0, 0);
      tma_load_2d(b_s + kN * 128, &b_map, &bar, 64, 0);
    }
  }
  if (!wait_bounded(&bar, 0)) {
    if (t == 0) d_out[0] = 12345.f;  // the copies never completed
    return;
  }
  for (int i = t; i < 2 * 64 * 128; i += 128) a_raw[i] = a_s[i];

  float d[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) d[i] = 0.f;
  const int w = warp_in_warpgroup(), l = t % 32;
  warpgroup_arrive();
#pragma unroll
  for (int s = 0; s < kK / 16; ++s) {
    const int box = s / 4, kk = s % 4;
    uint64_t db;
    if constexpr (kBMn) {
      db = make_desc_mnmajor_sw128(b_s + s * 16 * 128, kK * 128);
    } else {
      db = make_desc_kmajor_sw128(b_s + box * kN * 128 + kk * 32);
    }
    if constexpr (kRs) {
      uint32_t a[4];
      const int r = 16 * w + l / 4, k = 16 * s + 2 * (l % 4);
      auto pair = [&](int row, int col) {
        return uint32_t(a_global[row * kK + col]) | (uint32_t(a_global[row * kK + col + 1]) << 16);
      };
      a[0] = pair(r, k);
      a[1] = pair(r + 8, k);
      a[2] = pair(r, k + 8);
      a[3] = pair(r + 8, k + 8);
      wgmma_rs<kN, kBf16, kBMn ? 1 : 0>(d, a, db, 1);
    } else {
      const uint64_t da = make_desc_kmajor_sw128(a_s + box * 8192 + kk * 32);
      wgmma_ss<kN, kBf16, 0, kBMn ? 1 : 0>(d, da, db, 1);
    }
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(d);
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const int r = 16 * w + l / 4, c = 8 * j + 2 * (l % 4);
    d_out[r * kN + c] = d[4 * j];
    d_out[r * kN + c + 1] = d[4 * j + 1];
    d_out[(r + 8) * kN + c] = d[4 * j + 2];
    d_out[(r + 8) * kN + c + 1] = d[4 * j + 3];
  }
#endif
}

__global__ void __launch_bounds__(128, 1)
    tma3d_kernel(const __grid_constant__ CUtensorMap map, int c0, int c1, int c2, uint8_t* out) {
#ifdef LATTN_SM90A_BODY
  __shared__ __align__(1024) uint8_t tile[8192];
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&bar, 8192);
    tma_load_3d(tile, &map, &bar, c0, c1, c2, CacheHint::kEvictFirst);
  }
  if (!wait_bounded(&bar, 0)) return;  // out keeps its poison: the test fails
  for (int i = threadIdx.x; i < 8192; i += blockDim.x) out[i] = tile[i];
#endif
}

bool is_sm90() {
  int dev = 0, major = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&dev));
  LATTN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major == 9;
}

CUtensorMap map_2d(const char* name, bool bf16, const void* base, uint64_t inner, uint64_t outer, uint32_t box0,
                   uint32_t box1) {
  const std::array<cuuint64_t, 2> dims{inner, outer};
  const std::array<cuuint64_t, 1> strides{inner * 2};
  const std::array<cuuint32_t, 2> box{box0, box1};
  TensorMapSpec s;
  s.name = name;
  s.dtype = bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  s.base = base;
  s.dims = dims;
  s.strides = strides;
  s.box = box;
  return make_tensor_map(s);
}

template <int kN, bool kBf16, bool kBMn, bool kRs>
void launch(const void* a, const void* b, float* d, void* a_raw) {
  const CUtensorMap am = map_2d("A", kBf16, a, kK, 64, 64, 64);
  const CUtensorMap bm = kBMn ? map_2d("B", kBf16, b, kN, kK, 64, kK) : map_2d("B", kBf16, b, kK, kN, 64, kN);
  const int smem = 64 * kK * 2 + kN * kK * 2;
  auto kernel = wgmma_kernel<kN, kBf16, kBMn, kRs>;
  LATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, 128, smem>>>(am, bm, static_cast<const uint16_t*>(a), d, static_cast<uint8_t*>(a_raw));
  LATTN_CUDA_CHECK_LAUNCH("wgmma_kernel");
  LATTN_CUDA_CHECK(cudaDeviceSynchronize());
}

template <bool kBf16, bool kBMn, bool kRs>
void launch_n(int n, const void* a, const void* b, float* d, void* a_raw) {
  switch (n) {
    case 32:
      return launch<32, kBf16, kBMn, kRs>(a, b, d, a_raw);
    case 64:
      return launch<64, kBf16, kBMn, kRs>(a, b, d, a_raw);
    case 128:
      return launch<128, kBf16, kBMn, kRs>(a, b, d, a_raw);
    default:
      return launch<256, kBf16, kBMn, kRs>(a, b, d, a_raw);
  }
}

template <bool kBf16>
void launch_case(WgmmaCase c, int n, const void* a, const void* b, float* d, void* a_raw) {
  switch (c) {
    case WgmmaCase::kSsKMajorB:
      return launch_n<kBf16, false, false>(n, a, b, d, a_raw);
    case WgmmaCase::kSsMnMajorB:
      return launch_n<kBf16, true, false>(n, a, b, d, a_raw);
    case WgmmaCase::kRsKMajorB:
      return launch_n<kBf16, false, true>(n, a, b, d, a_raw);
    case WgmmaCase::kRsMnMajorB:
      return launch_n<kBf16, true, true>(n, a, b, d, a_raw);
  }
}

}  // namespace

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n) { LATTN_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(p); }
};

bool run_wgmma_case(WgmmaCase c, int n, bool bf16, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                    std::vector<float>& d, std::vector<uint8_t>& a_smem_raw) {
  if (!is_sm90()) return false;
  DeviceBuffer<uint16_t> da(a.size()), db(b.size());
  DeviceBuffer<float> dd(size_t(64) * n);
  DeviceBuffer<uint8_t> draw(2 * 64 * 128);
  LATTN_CUDA_CHECK(cudaMemcpy(da.p, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  LATTN_CUDA_CHECK(cudaMemcpy(db.p, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  LATTN_CUDA_CHECK(cudaMemset(dd.p, 0xFF, size_t(64) * n * 4));  // NaN: unwritten outputs fail
  if (bf16) {
    launch_case<true>(c, n, da.p, db.p, dd.p, draw.p);
  } else {
    launch_case<false>(c, n, da.p, db.p, dd.p, draw.p);
  }
  d.resize(size_t(64) * n);
  a_smem_raw.resize(2 * 64 * 128);
  LATTN_CUDA_CHECK(cudaMemcpy(d.data(), dd.p, d.size() * 4, cudaMemcpyDeviceToHost));
  LATTN_CUDA_CHECK(cudaMemcpy(a_smem_raw.data(), draw.p, a_smem_raw.size(), cudaMemcpyDeviceToHost));
  return true;
}

bool run_tma_3d_case(const std::vector<uint16_t>& cache, int blocks, int block_size, int col0, int row0, int block,
                     std::vector<uint8_t>& out) {
  if (!is_sm90()) return false;
  DeviceBuffer<uint16_t> dc(cache.size());
  DeviceBuffer<uint8_t> dout(8192);
  LATTN_CUDA_CHECK(cudaMemcpy(dc.p, cache.data(), cache.size() * 2, cudaMemcpyHostToDevice));
  LATTN_CUDA_CHECK(cudaMemset(dout.p, 0xFF, 8192));
  const std::array<cuuint64_t, 3> dims{576, cuuint64_t(block_size), cuuint64_t(blocks)};
  const std::array<cuuint64_t, 2> strides{576 * 2, cuuint64_t(block_size) * 576 * 2};
  const std::array<cuuint32_t, 3> box{64, 64, 1};
  TensorMapSpec s;
  s.name = "paged cache";
  s.base = dc.p;
  s.dims = dims;
  s.strides = strides;
  s.box = box;
  const CUtensorMap map = make_tensor_map(s);
  tma3d_kernel<<<1, 128>>>(map, col0, row0, block, dout.p);
  LATTN_CUDA_CHECK_LAUNCH("tma3d_kernel");
  LATTN_CUDA_CHECK(cudaDeviceSynchronize());
  out.resize(8192);
  LATTN_CUDA_CHECK(cudaMemcpy(out.data(), dout.p, 8192, cudaMemcpyDeviceToHost));
  return true;
}

}  // namespace lattn::test::sm90
