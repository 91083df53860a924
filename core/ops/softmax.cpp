#include "core/ops/softmax.h"

#include "core/ops/cpu/softmax.h"
#include "core/ops/cuda/softmax.h"
#include "core/ops/dispatch.h"

namespace primer::ops {

Tensor softmax(const Tensor& x) {
  expect_float(x, "softmax", "x", x.device());
  PRIMER_CHECK(x.dim() >= 1, "softmax: argument 'x' {} needs at least one dim", x.describe());
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (y.numel() == 0) return y;
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  if (x.is_cpu())
    cpu::softmax(y.data_ptr(), xc.data_ptr(), x.dtype(), rows, cols);
  else
    PRIMER_ON_CUDA(cuda_ops::softmax(y.data_ptr(), xc.data_ptr(), x.dtype(), rows, cols));
  return y;
}

Tensor softmax_backward(const Tensor& y, const Tensor& dy) {
  expect_float(y, "softmax_backward", "y", y.device());
  expect(dy, "softmax_backward", "dy", y.device(), {y.dtype()});
  expect_shape(dy, "softmax_backward", "dy", y.shape());
  PRIMER_CHECK(y.dim() >= 1, "softmax_backward: argument 'y' {} needs at least one dim", y.describe());
  const Tensor yc = y.contiguous(), dyc = dy.contiguous();
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
  if (dx.numel() == 0) return dx;
  const int64_t cols = y.size(-1), rows = y.numel() / cols;
  if (y.is_cpu())
    cpu::softmax_backward(dx.data_ptr(), yc.data_ptr(), dyc.data_ptr(), y.dtype(), rows, cols);
  else
    PRIMER_ON_CUDA(cuda_ops::softmax_backward(dx.data_ptr(), yc.data_ptr(), dyc.data_ptr(), y.dtype(), rows, cols));
  return dx;
}

}  // namespace primer::ops
