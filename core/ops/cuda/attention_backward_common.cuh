// What the two flash-attention backward kernels share (mma.sync in attention_backward.cu, Hopper wgmma in
// attention_backward_wgmma.cu): their arguments, the delta preprocess kernel, and the wgmma launcher that
// attention_backward() dispatches to when wgmma_available().
#pragma once
#include <cstdint>

#include "core/ops/cuda/attention_mask.cuh"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/mma.cuh"

namespace primer::ops::cuda_ops::attn {

using tile::bf16;

constexpr float kLog2e = 1.4426950408889634f;

struct BackwardArgs {
  const bf16 *q, *k, *v, *dout;
  const float *lse, *delta;
  float* dq_accum;
  bf16 *dk, *dv;
  int Hq, Hkv, group;
  float scale, scale_log2;
  Mask mask;
};

// delta[b, h, i] = sum_d dout[b, i, h, d] * out[b, i, h, d], and dq_accum's row [b, i, h, :] zeroed for the
// backward kernel's atomics (and dq_accum2's, when a second source has its own queries); one warp per (b, i, h) row.
template <int kDh> __global__ void attention_delta_kernel(float* __restrict__ delta, float* __restrict__ dq_accum,
                                                          float* __restrict__ dq_accum2, const bf16* __restrict__ dout,
                                                          const bf16* __restrict__ out, int64_t rows, int Tq, int Hq) {
  cuda::await_prior_grid();
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(dout + row * kDh);
  const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(out + row * kDh);
  float sum = 0;
#pragma unroll
  for (int c = lane; c < kDh / 2; c += 32) {
    const float2 d = __bfloat1622float2(d2[c]), o = __bfloat1622float2(o2[c]);
    sum += d.x * o.x + d.y * o.y;
  }
  if (lane < kDh / 4) {
    reinterpret_cast<float4*>(dq_accum + row * kDh)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (dq_accum2) reinterpret_cast<float4*>(dq_accum2 + row * kDh)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) {
    const int64_t h = row % Hq, bi = row / Hq, i = bi % Tq, b = bi / Tq;
    delta[(b * Hq + h) * Tq + i] = sum;
  }
}

// The Hopper kernel (sm_90a builds only; call it only when wgmma_available()), after attention_delta_kernel;
// head_dim 64 or 128.
void launch_backward_wgmma(const BackwardArgs& a, int B, int Dh);
// The same over two key sources in one grid: a0 and a1 are each source's arguments, with one dout, lse and delta.
void launch_backward_two_sources_wgmma(const BackwardArgs& a0, const BackwardArgs& a1, int B, int Dh);

}  // namespace primer::ops::cuda_ops::attn
