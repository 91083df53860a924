// CPU SwiGLU (f32/f64). Tensors are contiguous, of one shape and dtype, and already validated.
#pragma once
#include "core/tensor.h"

namespace primer::ops::cpu {

void swiglu(const Tensor& h, const Tensor& gate, const Tensor& up);
void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dh, const Tensor& gate, const Tensor& up);

}  // namespace primer::ops::cpu
