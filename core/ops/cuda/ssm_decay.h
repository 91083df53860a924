// CUDA launchers of ops::ssm_decay (compute stream): contiguous a [rows, P] of `a_dtype` (f32/bf16), A_log [A] and
// dt_bias [P] f32, g and delta (nullable) f32 [rows, P]. The backward writes da (a_dtype) and the per-element
// parameter terms dz and dg·g (f32 [rows, P]), which the op sums over rows.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

struct SsmDecayDims {
  int64_t rows, params, group;  // P values per row; A_log entry p / group
};

void ssm_decay_forward(float* g, float* delta, const void* a, const float* A_log, const float* dt_bias,
                       const SsmDecayDims& dims, DType a_dtype);
void ssm_decay_backward(void* da, float* dz, float* dg_g, const float* dg, const float* ddelta, const void* a,
                        const float* A_log, const float* dt_bias, const SsmDecayDims& dims, DType a_dtype);

}  // namespace primer::ops::cuda_ops
