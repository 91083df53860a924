#include "core/ops/rmsnorm.h"

#include "core/ops/cpu/rmsnorm.h"
#include "core/ops/cuda/rmsnorm.h"
#include "core/ops/dispatch.h"

namespace primer::ops {
namespace {

// Validates x and w; returns D, the normalised (last) dimension.
int64_t check_x_and_w(const char* op, const Tensor& x, const Tensor& w) {
  expect_float(x, op, "x", x.device());
  PRIMER_CHECK(x.dim() >= 1 && x.size(-1) > 0, "{}: argument 'x' is {}, expected a non-empty last dimension", op,
               x.describe());
  const int64_t D = x.size(-1);
  if (x.is_cuda()) {
    const int64_t vec = 16 / int64_t(dtype_size(x.dtype()));  // elements per 16-byte pack
    const int64_t max_d = cuda_ops::kRmsNormMaxPacks * (D % vec == 0 ? vec : 1);
    PRIMER_CHECK(D <= max_d,
                 "{}: argument 'x' is {}, the CUDA path supports a last dimension up to {} when it is a multiple of "
                 "{}, else up to {}",
                 op, x.describe(), cuda_ops::kRmsNormMaxPacks * vec, vec, cuda_ops::kRmsNormMaxPacks);
  }
  expect(w, op, "w", x.device(), {x.dtype()});
  expect_shape(w, op, "w", {D});
  return D;
}

}  // namespace

Tensor rmsnorm(const Tensor& x, const Tensor& w, double eps, Tensor* rstd_out) {
  const int64_t D = check_x_and_w("rmsnorm", x, w);
  PRIMER_CHECK(eps >= 0, "rmsnorm: eps is {}, expected >= 0", eps);
  const int64_t rows = x.numel() / D;
  const Tensor xc = x.contiguous(), wc = w.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, accum_dtype(x.dtype()), x.device());
  if (rows > 0) {
    if (x.is_cpu()) {
      cpu::rmsnorm(y, rstd, xc, wc, eps);
    } else {
      PRIMER_ON_CUDA(cuda_ops::rmsnorm_forward(y.data_ptr(), rstd.data<float>(), xc.data_ptr(), wc.data_ptr(), rows, D,
                                               float(eps), x.dtype()));
    }
  }
  if (rstd_out) *rstd_out = rstd;
  return y;
}

Tensor rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                        const Tensor& dw_accum) {
  constexpr const char* op = "rmsnorm_backward";
  const int64_t D = check_x_and_w(op, x, w);
  const int64_t rows = x.numel() / D;
  expect(dy, op, "dy", x.device(), {x.dtype()});
  expect_shape(dy, op, "dy", x.shape());
  expect(rstd, op, "rstd", x.device(), {accum_dtype(x.dtype())});
  expect_shape(rstd, op, "rstd", {rows});
  expect(dw_accum, op, "dw_accum", x.device(), {accum_dtype(x.dtype())});
  expect_shape(dw_accum, op, "dw_accum", {D});
  PRIMER_CHECK(dw_accum.is_contiguous(), "{}: argument 'dw_accum' is a non-contiguous view {}, expected contiguous", op,
               dw_accum.describe());
  const Tensor dyc = dy.contiguous(), xc = x.contiguous(), wc = w.contiguous(), rc = rstd.contiguous();
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (rows > 0) {
    if (x.is_cpu()) {
      cpu::rmsnorm_backward(dx, dw_accum, dyc, xc, wc, rc);
    } else {
      PRIMER_ON_CUDA(cuda_ops::rmsnorm_backward(dx.data_ptr(), dw_accum.data<float>(), dyc.data_ptr(), xc.data_ptr(),
                                                wc.data_ptr(), rc.data<float>(), rows, D, x.dtype()));
    }
  }
  return dx;
}

}  // namespace primer::ops
