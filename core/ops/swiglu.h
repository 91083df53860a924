// SwiGLU activation of the gated MLP: h = silu(gate) * up, elementwise, fp32 math.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// gate, up: same shape and dtype (f32/bf16 on CUDA; f32/f64 on CPU); returns h like gate.
Tensor swiglu(const Tensor& gate, const Tensor& up);
// Sets *dgate and *dup to new tensors (like gate): dgate = dh * up * silu'(gate), dup = dh * silu(gate).
void swiglu_backward(const Tensor& dh, const Tensor& gate, const Tensor& up, Tensor* dgate, Tensor* dup);

}  // namespace primer::ops
