// The generic decode kernel: one CTA per (query token, head), 4 warps. Each
// warp takes every 4th key: the lanes compute the dot product over L + R
// (warp reduction), then update the warp's online softmax and its output
// accumulator in shared memory; the four warps' states are merged at the end.
#include "cuda/smxx/decode_generic.h"

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/common/index_check.cuh"

namespace lattn::cuda {
namespace {

constexpr int kWarps = 4;

__global__ void __launch_bounds__(kWarps * 32) decode_generic_kernel(const __grid_constant__ DecodeParams p) {
  extern __shared__ float gsm[];
  const int D = p.L + p.R;
  float* q = gsm;        // [D]
  float* acc = gsm + D;  // [kWarps][L]
  __shared__ float warp_m[kWarps], warp_l[kWarps];
  const int token = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const DType qt = DType(p.q_dtype), ct = DType(p.cache_dtype), ot = DType(p.out_dtype);

  // The request of this token: the last r with query_start_loc[r] <= token.
  if (token >= p.query_start_loc[p.batch]) return;
  int lo = 0, hi = p.batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.query_start_loc[mid] <= token) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int r = lo;
  const int q0 = p.query_start_loc[r], s_q = p.query_start_loc[r + 1] - q0;
  const int seq_len = p.seq_lens[r];
  const int limit = min(seq_len, seq_len - s_q + (token - q0) + 1);  // causal
  const int32_t* table = p.block_table + r * p.block_table_stride;

  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    q[d] = d < p.L ? load_f32(p.q_nope, qt, token * p.q_nope_stride_t + h * p.q_nope_stride_h + d)
                   : load_f32(p.q_pe, qt, token * p.q_pe_stride_t + h * p.q_pe_stride_h + (d - p.L));
  }
  for (int d = threadIdx.x; d < kWarps * p.L; d += blockDim.x) acc[d] = 0.f;
  __syncthreads();

  float* my_acc = acc + warp * p.L;
  float m = -INFINITY, l = 0.f;
  for (int key = warp; key < limit; key += kWarps) {
    // Checked (index_check.cuh): a block outside the cache is recorded and its key skipped.
    const int64_t block = checked_block_id(table, key / p.block_size, p.table_width, p.num_blocks, p.index_violations);
    if (block < 0) continue;  // warp-uniform: one key per warp
    const int64_t entry = block * p.cache_block_stride + int64_t(key % p.block_size) * D;
    float dot = 0.f;
    for (int d = lane; d < D; d += 32) dot += q[d] * load_f32(p.cache, ct, entry + d);
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const float s = dot * p.scale_log2;
    const float m_new = (isnan(m) || isnan(s)) ? NAN : fmaxf(m, s);  // a NaN score makes the row NaN
    const float alpha = exp2f(m - m_new);                            // m = -inf on the first key: 0
    const float pr = exp2f(s - m_new);
    l = l * alpha + pr;
    m = m_new;
    for (int d = lane; d < p.L; d += 32) my_acc[d] = my_acc[d] * alpha + pr * load_f32(p.cache, ct, entry + d);
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  __syncthreads();
  float m_all = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m_all = (isnan(m_all) || isnan(warp_m[w])) ? NAN : fmaxf(m_all, warp_m[w]);
  float l_all = 0.f, scale[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    scale[w] = warp_m[w] == -INFINITY ? 0.f : exp2f(warp_m[w] - m_all);
    l_all += warp_l[w] * scale[w];
  }
  const float inv = l_all == 0.f ? 0.f : p.out_scale / l_all;  // l_all NaN: the row is NaN
  for (int d = threadIdx.x; d < p.L; d += blockDim.x) {
    float v = 0.f;
    for (int w = 0; w < kWarps; ++w) v += acc[w * p.L + d] * scale[w];
    store_f32(p.out, ot, token * p.out_stride_t + h * p.out_stride_h + d, v * inv);
  }
  if (p.lse && threadIdx.x == 0) {
    p.lse[h * p.lse_stride_h + int64_t(token) * p.lse_stride_t] =
        l_all == 0.f ? -INFINITY : (m_all + log2f(l_all)) * 0.69314718055994531f;
  }
}

}  // namespace

size_t generic_decode_smem_bytes(int L, int R) { return size_t(kWarps * L + L + R) * sizeof(float); }

void launch_decode_generic(const DecodeParams& p, int num_tokens, cudaStream_t stream) {
  if (num_tokens == 0 || p.num_heads == 0) return;
  const size_t smem = generic_decode_smem_bytes(p.L, p.R);
  if (smem > 48 * 1024) {
    LATTN_CUDA_CHECK(
        cudaFuncSetAttribute(decode_generic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  const dim3 grid{unsigned(num_tokens), unsigned(p.num_heads)};
  decode_generic_kernel<<<grid, kWarps * 32, smem, stream>>>(p);
  LATTN_CUDA_CHECK_LAUNCH("decode_generic_kernel");
}

}  // namespace lattn::cuda
