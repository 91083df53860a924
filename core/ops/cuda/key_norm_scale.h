// CUDA launchers of ops::key_norm_scale (compute stream): contiguous k [rows, K], v [rows, V] of `dtype` (f32/bf16),
// r f32 [rows]; one warp per row, f32 math.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

void key_norm_scale_forward(void* k_hat, void* v_hat, float* r, const void* k, const void* v, int64_t rows, int64_t K,
                            int64_t V, float eps, DType dtype);
void key_norm_scale_backward(void* dk, void* dv, const void* dk_hat, const void* dv_hat, const void* k, const void* v,
                             const float* r, int64_t rows, int64_t K, int64_t V, DType dtype);

}  // namespace primer::ops::cuda_ops
