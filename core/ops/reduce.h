// Reductions: sum/mean over one dim, and whole-tensor sums. Deterministic: the summation order depends only on
// the shape. CUDA accumulates in fp32 (f32/bf16 input); CPU accumulates in f64.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// Sum / mean over `dim` (negative counts from the end); output dtype of x, `dim` kept as size 1 if keepdim.
Tensor sum(const Tensor& x, int dim, bool keepdim = false);
Tensor mean(const Tensor& x, int dim, bool keepdim = false);

// Sum of all elements / of their squares (for the global gradient norm): shape {1}, f32 (f64 for f64 input).
Tensor sum_all(const Tensor& x);
Tensor sumsq_all(const Tensor& x);

}  // namespace primer::ops
