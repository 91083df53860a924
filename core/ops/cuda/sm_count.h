// Multiprocessor count of the current device, for launchers that size grids to whole waves of resident blocks.
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

}  // namespace primer::ops::cuda_ops
