// Named CTA barriers (ids 1-15; 0 is __syncthreads) for syncing a subset of a CTA's warps, e.g. two warpgroups
// taking turns: `threads` threads in all arrive at the barrier, the syncing ones also wait for it to complete.
#pragma once

namespace primer::ops::cuda_ops::tile {

__device__ __forceinline__ void barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace primer::ops::cuda_ops::tile
