// Matrix multiplication and the linear layer built on it.
#pragma once
#include "core/ops/gemm_args.h"
#include "core/tensor.h"

namespace primer::ops {

// Row-major C = alpha * op(A) @ op(B) + beta * C, op = transpose when trans_*: A [M, K] ([K, M] if trans_a),
// B [K, N] ([N, K] if trans_b), C [M, N], or all three with one leading batch dim. beta == 0 never reads C.
// A/B may be views whose last dim is contiguous (others are copied); C must be. CPU: A, B, C all f32 or all f64.
// CUDA: A/B both bf16 (C bf16 or f32) or both f32 (C f32, no TF32); fp32 accumulation.
void gemm(const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, const Tensor& C, double alpha = 1.0,
          double beta = 0.0);
// A new C = op(A) @ op(B) of A's dtype.
Tensor matmul(const Tensor& A, const Tensor& B, bool trans_a = false, bool trans_b = false);
// A new D = A @ B + addend (addend [M, N] of A's dtype, read and never written). On CUDA the sum happens in the
// GEMM's epilogue (one rounding, no separate pass over D) when the addend is contiguous and 16-byte aligned.
Tensor matmul_add(const Tensor& A, const Tensor& B, const Tensor& addend);

// Linear layer in Hugging Face layout: W [out, in]; x [..., in] -> y [..., out] = x @ W^T (dtype of x).
Tensor linear(const Tensor& x, const Tensor& W);
// *dx = dy @ W (new, dtype of dy; plus dx_addend when that is defined: the gradient x already holds, summed in the
// GEMM) when dx != nullptr; dW_accum [out, in] (f32 on CUDA and for f32, f64 for f64) += dy^T @ x when defined.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor* dx, const Tensor& dW_accum,
                     const Tensor& dx_addend = Tensor());

// CUDA: while enabled, the first gemm of each new layout times every cuBLASLt candidate once (waiting for the GPU)
// and later calls run the fastest; otherwise the heuristic's first choice. Turn on for a warm-up step, not inside
// captured or latency-critical code. No effect in CPU-only builds.
void set_gemm_autotune(bool enabled);

// The validated backend description of gemm(A, ...) for tensors already in a usable layout (benchmarks use it to
// time cuBLASLt's alternative algorithms on the exact call gemm() makes).
GemmArgs gemm_args(const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, const Tensor& C, double alpha,
                   double beta);

}  // namespace primer::ops
