// CUDA SwiGLU launchers (compute stream). All pointers: n contiguous elements of `dtype` (f32/bf16).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

void swiglu_forward(void* h, const void* gate, const void* up, int64_t n, DType dtype);
void swiglu_backward(void* dgate, void* dup, const void* dh, const void* gate, const void* up, int64_t n, DType dtype);

}  // namespace primer::ops::cuda_ops
