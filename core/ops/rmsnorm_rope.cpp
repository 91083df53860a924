#include "core/ops/rmsnorm_rope.h"

#include "core/ops/cast.h"
#include "core/ops/cuda/rmsnorm_rope.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"

namespace primer::ops {
namespace {

void check_inputs(const char* op, const Tensor& x, const Tensor& w, const Tensor& positions, const Tensor& inv_freq) {
  expect_float(x, op, "x", x.device());
  PRIMER_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && x.size(3) > 0,
               "{}: argument 'x' is {}, expected [B, T, H, Dh] with Dh even", op, x.describe());
  expect(w, op, "w", x.device(), {x.dtype()});
  expect_shape(w, op, "w", {x.size(3)});
  expect(positions, op, "positions", x.device(), {DType::I32});
  expect_shape(positions, op, "positions", {x.size(0), x.size(1)});
  expect(inv_freq, op, "inv_freq", x.device(), {DType::F32});
  expect_shape(inv_freq, op, "inv_freq", {x.size(3) / 2});
}

[[maybe_unused]] cuda_ops::NormRopeShape cuda_shape(const Tensor& x) {
  return {x.size(0) * x.size(1), x.size(2), x.size(3), x.dtype()};
}

}  // namespace

Tensor rmsnorm_rope(const Tensor& x, const Tensor& w, double eps, const Tensor& positions, const Tensor& inv_freq,
                    Tensor* rstd_out) {
  check_inputs("rmsnorm_rope", x, w, positions, inv_freq);
  PRIMER_CHECK(eps >= 0, "rmsnorm_rope: eps is {}, expected >= 0", eps);
  const Tensor xc = x.contiguous(), wc = w.contiguous(), pc = positions.contiguous(), fc = inv_freq.contiguous();
  if (x.is_cuda() && x.numel() > 0) {
#ifdef PRIMER_WITH_CUDA
    // Outputs come fresh from the pool (256-byte aligned): the inputs decide.
    if (cuda_ops::norm_rope_supported(cuda_shape(x), {xc.data_ptr(), wc.data_ptr()})) {
      Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
      Tensor rstd = Tensor::empty({x.numel() / x.size(3)}, DType::F32, x.device());
      cuda_ops::rmsnorm_rope_forward(y.data_ptr(), rstd.data<float>(), xc.data_ptr(), wc.data_ptr(), pc.data<int32_t>(),
                                     fc.data<float>(), cuda_shape(x), float(eps));
      if (rstd_out) *rstd_out = rstd;
      return y;
    }
#endif
  }
  return rope(rmsnorm(xc, wc, eps, rstd_out), pc, fc);
}

Tensor rmsnorm_rope_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                             const Tensor& positions, const Tensor& inv_freq, const Tensor& dw_accum) {
  constexpr const char* op = "rmsnorm_rope_backward";
  check_inputs(op, x, w, positions, inv_freq);
  if (x.dtype() == DType::BF16)
    expect(dy, op, "dy", x.device(), {DType::BF16, DType::F32});
  else
    expect(dy, op, "dy", x.device(), {x.dtype()});
  expect_shape(dy, op, "dy", x.shape());
  const DType accum = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  expect(rstd, op, "rstd", x.device(), {accum});
  expect_shape(rstd, op, "rstd", {x.numel() / x.size(3)});
  expect(dw_accum, op, "dw_accum", x.device(), {accum});
  expect_shape(dw_accum, op, "dw_accum", w.shape());
  const Tensor dyc = dy.contiguous(), xc = x.contiguous(), wc = w.contiguous(), pc = positions.contiguous(),
               fc = inv_freq.contiguous(), rc = rstd.contiguous();
  if (x.is_cuda() && x.numel() > 0) {
#ifdef PRIMER_WITH_CUDA
    const cuda_ops::NormRopeShape s = cuda_shape(x);
    if (cuda_ops::norm_rope_supported(s, {dyc.data_ptr(), xc.data_ptr(), wc.data_ptr()})) {
      Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      Tensor dw_partial = Tensor::empty({cuda_ops::norm_rope_backward_blocks(s), x.size(3)}, DType::F32, x.device());
      cuda_ops::rmsnorm_rope_backward(dx.data_ptr(), dw_partial.data<float>(), dyc.data_ptr(), dy.dtype(),
                                      xc.data_ptr(), wc.data_ptr(), rc.data<float>(), pc.data<int32_t>(),
                                      fc.data<float>(), s);
      add_(dw_accum, sum(dw_partial, 0));
      return dx;
    }
#endif
  }
  // The two ops' backward: an f32 dy of bf16 x is rounded first (rope_backward keeps its input's dtype).
  const Tensor dy_x = dyc.dtype() == x.dtype() ? dyc : cast(dyc, x.dtype());
  return rmsnorm_backward(rope_backward(dy_x, pc, fc), xc, wc, rc, dw_accum);
}

}  // namespace primer::ops
