// An attribute of the current device, queried once: kernels run on one device per process in primer, so the first
// query holds.
#pragma once
#include "core/cuda_runtime.h"

namespace primer::ops::cuda_ops {

template <cudaDeviceAttr kAttribute> int device_attribute() {
  static const int value = [] {
    int n = 0;
    PRIMER_CUDA_CHECK(cudaDeviceGetAttribute(&n, kAttribute, cuda::current_device()));
    return n;
  }();
  return value;
}

}  // namespace primer::ops::cuda_ops
