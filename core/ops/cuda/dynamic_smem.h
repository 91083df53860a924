// Kernels that use more than 48 KB of dynamic shared memory must opt in, once per kernel.
#pragma once
#include "core/cuda_runtime.h"

namespace primer::ops::cuda_ops {

template <auto kKernel>
void allow_dynamic_smem(int bytes) {
  static const bool configured = [bytes] {
    PRIMER_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return true;
  }();
  (void)configured;
}

}  // namespace primer::ops::cuda_ops
