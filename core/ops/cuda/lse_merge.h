// CUDA launcher of ops::lse_merge (compute stream): contiguous out_a, out_b, out [B, T, H, Dh] of `dtype` (f32/bf16)
// and f32 lse_a, lse_b, lse [B, H, T]; one warp per (b, t, h) row, one pass over the outputs.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

void lse_merge(void* out, float* lse, const void* out_a, const float* lse_a, const void* out_b, const float* lse_b,
               int64_t B, int64_t T, int64_t H, int64_t Dh, DType dtype);

}  // namespace primer::ops::cuda_ops
