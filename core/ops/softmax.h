// Softmax over the last dim, numerically stable (max-subtracted), fp32 math on CUDA for f32/bf16.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

Tensor softmax(const Tensor& x);                             // same shape and dtype as x
Tensor softmax_backward(const Tensor& y, const Tensor& dy);  // dx = y * (dy - sum_last(dy * y)); y = softmax(x)

}  // namespace primer::ops
