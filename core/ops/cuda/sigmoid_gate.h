// CUDA launchers of ops::sigmoid_gate (compute stream): contiguous a [rows, P] of `a_dtype` (f32/bf16), bias [P] of
// `bias_dtype` or null, y and dy f32 [rows, P]; the backward writes da in a_dtype.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

struct SigmoidGateDims {
  int64_t rows, params;
};

void sigmoid_gate_forward(float* y, const void* a, const void* bias, float offset, const SigmoidGateDims& dims,
                          DType a_dtype, DType bias_dtype);
void sigmoid_gate_backward(void* da, const float* dy, const void* a, const void* bias, const SigmoidGateDims& dims,
                           DType a_dtype, DType bias_dtype);

}  // namespace primer::ops::cuda_ops
