// Kernels that use more than 48 KB of dynamic shared memory must opt in, once per kernel and device: the attribute
// belongs to the kernel in one device's context, so a process that launches on a second GPU sets it there too.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/cuda_runtime.h"

namespace primer::ops::cuda_ops {

template <auto kKernel> void allow_dynamic_smem(int bytes) {
  static std::atomic<uint64_t> configured{0};  // a bit per device index
  const uint64_t device = uint64_t(1) << cuda::current_device();
  if (configured.load(std::memory_order_acquire) & device) return;
  PRIMER_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  configured.fetch_or(device, std::memory_order_release);  // setting it twice in a race is harmless
}

}  // namespace primer::ops::cuda_ops
