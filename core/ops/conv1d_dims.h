// Sizes of a causal depthwise conv1d call, shared by its CPU and CUDA implementations.
#pragma once
#include <cstdint>

namespace primer::ops {

struct Conv1dDims {
  int64_t batch = 0, time = 0, channels = 0;
  int taps = 0;  // K
};

}  // namespace primer::ops
