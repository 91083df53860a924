// The current device's multiprocessor count and L2 size, for launchers that size grids to whole waves of resident
// blocks or order their blocks to share the L2.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/ops/cuda/device_attribute.h"

namespace primer::ops::cuda_ops {

inline int sm_count() { return std::max(1, device_attribute<cudaDevAttrMultiProcessorCount>()); }

inline int64_t l2_cache_bytes() { return device_attribute<cudaDevAttrL2CacheSize>(); }

// True when a launch of `blocks` long-lived blocks (the sequential chunk passes: one block per value slice, head and
// sequence for the whole sequence) would leave half the SMs or more idle; those passes then narrow their value
// slices to double the blocks.
inline bool leaves_half_the_sms_idle(int64_t blocks) { return 2 * blocks <= sm_count(); }

}  // namespace primer::ops::cuda_ops
