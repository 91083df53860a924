// Whether the Hopper (wgmma) kernels run: the build has an sm_90a pass (CMake defines PRIMER_CUDA_SM90A when
// CMAKE_CUDA_ARCHITECTURES names 90a), the current device is compute capability 9.0, and PRIMER_NO_WGMMA is not
// set in the environment (which selects the mma.sync kernels, so both paths can be tested on one GPU).
#pragma once
#include <cstdlib>

#include "core/ops/cuda/device_attribute.h"

namespace primer::ops::cuda_ops {

inline bool wgmma_available() {
#ifdef PRIMER_CUDA_SM90A
  static const bool available = [] {
    const char* off = std::getenv("PRIMER_NO_WGMMA");
    return device_attribute<cudaDevAttrComputeCapabilityMajor>() == 9 &&
           device_attribute<cudaDevAttrComputeCapabilityMinor>() == 0 && !(off && *off && *off != '0');
  }();
  return available;
#else
  return false;
#endif
}

}  // namespace primer::ops::cuda_ops
