// Softmax kernels over the last dim of dense [rows, cols] arrays, CUDA launchers (f32/bf16 storage, fp32 math; compute
// stream).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

void softmax(void* y, const void* x, DType dtype, int64_t rows, int64_t cols);
void softmax_backward(void* dx, const void* y, const void* dy, DType dtype, int64_t rows, int64_t cols);

}  // namespace primer::ops::cuda_ops
