// The current device's multiprocessor count and L2 size, for launchers that size grids to whole waves of resident
// blocks or order their blocks to share the L2.
#pragma once
#include "core/cuda_runtime.h"

namespace primer::ops::cuda_ops {

inline int sm_count() {
  // Kernels run on one device per process in primer, so the first query holds.
  static const int count = [] {
    int n = 0;
    PRIMER_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, cuda::current_device()));
    return n > 0 ? n : 1;
  }();
  return count;
}

inline int64_t l2_cache_bytes() {
  static const int64_t bytes = [] {
    int n = 0;
    PRIMER_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrL2CacheSize, cuda::current_device()));
    return int64_t(n);
  }();
  return bytes;
}

// True when a launch of `blocks` long-lived blocks (the sequential chunk passes: one block per value slice, head and
// sequence for the whole sequence) would leave half the SMs or more idle; those passes then narrow their value
// slices to double the blocks.
inline bool leaves_half_the_sms_idle(int64_t blocks) { return 2 * blocks <= sm_count(); }

}  // namespace primer::ops::cuda_ops
