// Deterministic warp and block sums (fixed shuffle/tree order) and warp maxima for kernels that reduce one row per
// block.
#pragma once

namespace primer::ops::cuda_ops {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum of v over the block, returned to every thread. blockDim.x must be a multiple of 32.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_totals[32];
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // a previous call may still be reading warp_totals
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? warp_totals[lane] : 0.f;
  return warp_sum(v);
}

}  // namespace primer::ops::cuda_ops
