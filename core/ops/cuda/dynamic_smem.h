// Kernels that use more than 48 KB of dynamic shared memory must opt in, once per kernel and device: the attribute
// belongs to the kernel in one device's context, so a process that launches on a second GPU sets it there too.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/device_attribute.h"

namespace primer::ops::cuda_ops {

template <auto kKernel> void allow_dynamic_smem(int bytes) {
  static std::atomic<uint64_t> configured{0};  // a bit per device index
  const uint64_t device = uint64_t(1) << cuda::current_device();
  if (configured.load(std::memory_order_acquire) & device) return;
  PRIMER_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  configured.fetch_or(device, std::memory_order_release);  // setting it twice in a race is harmless
}

// The most dynamic shared memory one block may opt in to on the current device (227 KB on Hopper, 163 KB on an
// A100), for kernels that take deeper pipelines where they fit.
inline size_t max_dynamic_smem() { return size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()); }

}  // namespace primer::ops::cuda_ops
