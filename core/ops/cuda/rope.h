// CUDA rotary-embedding launcher (compute stream). y, x contiguous [tokens, heads, head_dim] of `dtype` (f32/bf16).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

// positions i32 [tokens]; inv_freq f32 [head_dim/2]; `inverse` rotates by -angle (the backward).
void rope(void* y, const void* x, const int32_t* positions, const float* inv_freq, int64_t tokens, int64_t heads,
          int64_t head_dim, DType dtype, bool inverse);

}  // namespace primer::ops::cuda_ops
