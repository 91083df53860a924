#include "core/ops/rmsnorm.h"

#include "core/ops/cpu/rmsnorm.h"
#include "core/ops/cuda/rmsnorm.h"
#include "core/ops/dispatch.h"

namespace primer::ops {
namespace {

// Validates x, w and z; returns D, the normalised (last) dimension.
int64_t check_inputs(const char* op, const Tensor& x, const Tensor& w, const Tensor& z, const NormSpec& spec) {
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
    PRIMER_CHECK(spec.gate == NormGate::None || (D % vec == 0 && D <= cuda_ops::kRmsNormGatedMaxPacks * vec),
                 "{}: argument 'x' is {}, the gated CUDA path supports a last dimension that is a multiple of {} up "
                 "to {}",
                 op, x.describe(), vec, cuda_ops::kRmsNormGatedMaxPacks * vec);
  }
  if (w.defined()) {
    expect(w, op, "w", x.device(), {x.dtype()});
    if (w.dim() == 2) {
      PRIMER_CHECK(x.dim() >= 2 && x.size(-2) == w.size(0),
                   "{}: per-head weight 'w' {} needs x [..., {}, {}], got x {}", op, w.describe(), w.size(0), D,
                   x.describe());
      expect_shape(w, op, "w", {w.size(0), D});
    } else {
      expect_shape(w, op, "w", {D});
    }
  }
  PRIMER_CHECK(z.defined() == (spec.gate != NormGate::None),
               "{}: argument 'z' (the gate) is {}, expected {} (spec.gate {})", op,
               z.defined() ? z.describe() : "undefined", spec.gate == NormGate::None ? "undefined" : "a tensor like x",
               spec.gate == NormGate::None    ? "None"
               : spec.gate == NormGate::After ? "After"
                                              : "Before");
  if (z.defined()) {
    expect(z, op, "z", x.device(), {x.dtype()});
    expect_shape(z, op, "z", x.shape());
  }
  PRIMER_CHECK(spec.eps >= 0, "{}: eps is {}, expected >= 0", op, spec.eps);
  PRIMER_CHECK(!spec.from_output || (spec.gate == NormGate::None && !w.defined()),
               "{}: spec.from_output (x the norm's output) needs no gate and a unit weight", op);
  return D;
}

[[maybe_unused]] const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
Tensor contiguous_or_none(const Tensor& t) { return t.defined() ? t.contiguous() : Tensor(); }

[[maybe_unused]] cuda_ops::NormShape cuda_shape(const Tensor& x, const Tensor& w, const NormSpec& spec) {
  const int64_t D = x.size(-1);
  return {x.numel() / D, D, w.defined() ? w.numel() / D : 0, int(spec.gate), spec.l2, x.dtype(), spec.from_output};
}

}  // namespace

Tensor rmsnorm(const Tensor& x, const Tensor& w, const Tensor& z, const NormSpec& spec, Tensor* rstd_out) {
  const int64_t D = check_inputs("rmsnorm", x, w, z, spec);
  const int64_t rows = x.numel() / D;
  const Tensor xc = x.contiguous(), wc = contiguous_or_none(w), zc = contiguous_or_none(z);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, accum_dtype(x.dtype()), x.device());
  if (rows > 0) {
    if (x.is_cpu()) {
      cpu::rmsnorm(y, rstd, xc, wc, zc, spec);
    } else {
      PRIMER_ON_CUDA(cuda_ops::rmsnorm_forward(y.data_ptr(), rstd.data<float>(), xc.data_ptr(), ptr_or_null(wc),
                                               ptr_or_null(zc), cuda_shape(x, w, spec), float(spec.eps)));
    }
  }
  if (rstd_out) *rstd_out = rstd;
  return y;
}

NormGrads rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& z, const Tensor& rstd,
                           const NormSpec& spec, const Tensor& dw_accum) {
  constexpr const char* op = "rmsnorm_backward";
  const int64_t D = check_inputs(op, x, w, z, spec);
  const int64_t rows = x.numel() / D;
  expect(dy, op, "dy", x.device(), {x.dtype()});
  expect_shape(dy, op, "dy", x.shape());
  expect(rstd, op, "rstd", x.device(), {accum_dtype(x.dtype())});
  expect_shape(rstd, op, "rstd", {rows});
  PRIMER_CHECK(dw_accum.defined() == w.defined(), "{}: argument 'dw_accum' is {} but 'w' is {}", op,
               dw_accum.defined() ? "given" : "undefined", w.defined() ? "given" : "undefined (unit weight)");
  if (dw_accum.defined()) {
    expect(dw_accum, op, "dw_accum", x.device(), {accum_dtype(x.dtype())});
    expect_shape(dw_accum, op, "dw_accum", w.shape());
    PRIMER_CHECK(dw_accum.is_contiguous(), "{}: argument 'dw_accum' is a non-contiguous view {}, expected contiguous",
                 op, dw_accum.describe());
  }
  const Tensor dyc = dy.contiguous(), xc = x.contiguous(), wc = contiguous_or_none(w), zc = contiguous_or_none(z),
               rc = rstd.contiguous();
  NormGrads grads{Tensor::empty(x.shape(), x.dtype(), x.device()),
                  z.defined() ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor()};
  if (rows > 0) {
    if (x.is_cpu()) {
      cpu::rmsnorm_backward(grads.dx, grads.dz, dw_accum, dyc, xc, wc, zc, rc, spec);
    } else {
      PRIMER_ON_CUDA(cuda_ops::rmsnorm_backward(grads.dx.data_ptr(), grads.dz.defined() ? grads.dz.data_ptr() : nullptr,
                                                dw_accum.defined() ? dw_accum.data<float>() : nullptr, dyc.data_ptr(),
                                                xc.data_ptr(), ptr_or_null(wc), ptr_or_null(zc), rc.data<float>(),
                                                cuda_shape(x, w, spec)));
    }
  }
  return grads;
}

}  // namespace primer::ops
