// RMSNorm over the last dimension (Qwen3/Llama): y = w * (x * rsqrt(mean(x^2) + eps)), math in fp32 or wider.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// x [..., D] (f32/bf16 on CUDA; f32/f64 on CPU), w [D] of x's dtype; returns y like x. If rstd_out is non-null it
// is set to a new tensor of the per-row rsqrt(mean(x^2) + eps): f32 [rows] (f64 for f64 x), rows = numel / D.
Tensor rmsnorm(const Tensor& x, const Tensor& w, double eps, Tensor* rstd_out);

// Returns dx (like x); accumulates dw_accum (f32 [D], f64 for f64 x) += sum over rows of dy * x * rstd.
// Deterministic on CUDA (per-block partial sums reduced in a fixed order; no float atomics).
Tensor rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dw_accum);

}  // namespace primer::ops
