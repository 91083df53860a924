#include "core/ops/cross_entropy.h"

#include <algorithm>

#include "core/ops/cpu/cross_entropy.h"
#include "core/ops/cuda/cross_entropy.h"
#include "core/ops/dispatch.h"
#include "core/ops/gemm.h"

namespace primer::ops {
namespace {

constexpr const char* kOp = "fused_linear_cross_entropy";

// Logits, losses and (on the CPU) gradients are computed in this dtype: fp32 on CUDA whatever the input dtype.
DType accum_dtype(const Tensor& x) { return x.is_cpu() ? x.dtype() : DType::F32; }

void validate(const Tensor& x, const Tensor& W, const Tensor& targets, const Tensor& dW_accum, int64_t chunk_tokens) {
  PRIMER_CHECK(x.defined(), "{}: argument 'x' is undefined", kOp);
  if (x.is_cpu())
    expect(x, kOp, "x", x.device(), {DType::F32, DType::F64});
  else
    expect(x, kOp, "x", x.device(), {DType::BF16, DType::F32});
  PRIMER_CHECK(x.dim() == 2, "{}: argument 'x' is {}, expected [N, D]", kOp, x.describe());
  expect(W, kOp, "W", x.device(), {x.dtype()});
  PRIMER_CHECK(W.dim() == 2 && W.size(1) == x.size(1), "{}: argument 'W' is {}, expected [V, {}]", kOp, W.describe(),
               x.size(1));
  expect(targets, kOp, "targets", x.device(), {DType::I32});
  expect_shape(targets, kOp, "targets", {x.size(0)});
  if (dW_accum.defined()) {
    expect(dW_accum, kOp, "dW_accum", x.device(), {accum_dtype(x)});
    expect_shape(dW_accum, kOp, "dW_accum", W.shape());
  }
  PRIMER_CHECK(chunk_tokens > 0, "{}: chunk_tokens must be positive, got {}", kOp, chunk_tokens);
}

// logits (accum dtype) -> grad (dtype of x; may be the same tensor) and per-row losses.
void softmax_xent_rows(const Tensor& logits, const Tensor& grad, const Tensor& targets, int64_t ignore_index,
                       double grad_scale, const Tensor& row_loss) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (logits.is_cpu()) {  // the CPU gradient is the logits buffer itself (same dtype)
    cpu::xent_rows(grad.dtype(), grad.data_ptr(), targets.data<int32_t>(), rows, vocab, ignore_index, grad_scale,
                   row_loss.data_ptr());
  } else {
    PRIMER_ON_CUDA(cuda_ops::xent_rows(logits.data<float>(), grad.dtype(), grad.data_ptr(), targets.data<int32_t>(),
                                       rows, vocab, ignore_index, float(grad_scale), row_loss.data<float>()));
  }
}

}  // namespace

Tensor fused_linear_cross_entropy(const Tensor& x_in, const Tensor& W, const Tensor& targets_in, int64_t ignore_index,
                                  double grad_scale, Tensor* dx, const Tensor& dW_accum, int64_t chunk_tokens) {
  validate(x_in, W, targets_in, dW_accum, chunk_tokens);
  const Tensor x = x_in.contiguous(), targets = targets_in.contiguous();
  const int64_t n = x.size(0), vocab = W.size(0);
  const DType acc = accum_dtype(x);
  const int64_t chunk = std::max<int64_t>(std::min(chunk_tokens, n), 1);

  const Tensor logits_buf = Tensor::empty({chunk, vocab}, acc, x.device());
  // The gradient overwrites the logits in place when dtypes agree; a bf16 gradient needs its own buffer.
  const Tensor grad_buf = x.dtype() == acc ? logits_buf : Tensor::empty({chunk, vocab}, x.dtype(), x.device());
  const Tensor row_loss = Tensor::empty({n}, acc, x.device());
  if (dx) *dx = Tensor::empty(x.shape(), x.dtype(), x.device());

  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t r1 = std::min(n, r0 + chunk);
    const Tensor xc = x.slice(0, r0, r1);
    const Tensor logits = logits_buf.slice(0, 0, r1 - r0), grad = grad_buf.slice(0, 0, r1 - r0);
    gemm(xc, false, W, true, logits);
    softmax_xent_rows(logits, grad, targets.slice(0, r0, r1), ignore_index, grad_scale, row_loss.slice(0, r0, r1));
    if (dx) gemm(grad, false, W, false, dx->slice(0, r0, r1));
    if (dW_accum.defined()) gemm(grad, true, xc, false, dW_accum, 1.0, 1.0);
  }

  Tensor loss_sum = Tensor::empty({1}, acc, x.device());
  if (x.is_cpu())
    cpu::sum_losses(acc, row_loss.data_ptr(), n, loss_sum.data_ptr());
  else
    PRIMER_ON_CUDA(cuda_ops::sum_losses(row_loss.data<float>(), n, loss_sum.data<float>()));
  return loss_sum;
}

}  // namespace primer::ops
