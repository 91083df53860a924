// Kernels launched with Programmatic Dependent Launch (Hopper): a kernel's blocks are placed on the SMs while the
// kernel before it on the stream finishes, and wait there (griddepcontrol.wait) until it has completed and its writes
// are visible. That hides the ~2 µs a dependent launch otherwise leaves the GPU idle between two kernels (3,584 such
// gaps, 7 ms, in one training step of the 50% GDN hybrid at 1 × 16384 on an H200; docs/perf.md).
//
// The contract: every kernel launched by launch_dependent calls await_prior_grid() before it touches global memory
// (reads of what the previous kernel wrote, and writes to what it reads). Then it lets the next kernel's blocks be
// placed. Where the previous work is not a kernel (a copy, a memset, an event from another stream) the launch waits
// for it as any launch does. PRIMER_NO_DEPENDENT_LAUNCH=1 launches every kernel plainly (to measure the gain, or to
// rule it out); on GPUs before Hopper the attribute and the instructions do nothing.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "core/cuda_runtime.h"

namespace primer::cuda {

// The first statement of every kernel that launch_dependent starts.
__device__ __forceinline__ void await_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, shared_bytes, stream()>>>(args...), its blocks allowed to wait for the previous kernel's end
// on the SMs (see above), and the launch checked.
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, Args&&... args) {
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream();
  config.attrs = &overlap;
  config.numAttrs = dependent_launch_enabled() ? 1 : 0;
  PRIMER_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace primer::cuda
