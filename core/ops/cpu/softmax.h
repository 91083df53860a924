// Softmax kernels over the last dim of dense [rows, cols] arrays, CPU loops (f32/f64; the fp64 reference).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cpu {

void softmax(void* y, const void* x, DType dtype, int64_t rows, int64_t cols);
void softmax_backward(void* dx, const void* y, const void* dy, DType dtype, int64_t rows, int64_t cols);

}  // namespace primer::ops::cpu
