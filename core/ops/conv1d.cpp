#include "core/ops/conv1d.h"

#include <utility>

#include "core/ops/cpu/conv1d.h"
#include "core/ops/cuda/conv1d.h"
#include "core/ops/dispatch.h"
#include "core/ops/rmsnorm.h"

namespace primer::ops {

namespace {

// Validates x, w, bias, state_in (shared by forward and backward) and returns the sizes.
Conv1dDims check_inputs(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& state_in) {
  PRIMER_CHECK(x.defined() && x.dim() == 3, "{}: argument 'x' is {}, expected [B, T, C]", op,
               x.defined() ? x.describe() : "undefined");
  expect(x, op, "x", x.device(),
         x.is_cpu() ? std::initializer_list<DType>{DType::F32, DType::F64}
                    : std::initializer_list<DType>{DType::F32, DType::BF16});
  expect(w, op, "w", x.device(), {x.dtype()});
  PRIMER_CHECK(w.dim() == 2 && w.size(0) == x.size(2) && w.size(1) >= 2 && w.size(1) <= 8,
               "{}: argument 'w' is {}, expected [C, K] with C = {} and K in 2..8", op, w.describe(), x.size(2));
  const Conv1dDims d{x.size(0), x.size(1), x.size(2), int(w.size(1))};
  if (bias.defined()) {
    expect(bias, op, "bias", x.device(), {x.dtype()});
    expect_shape(bias, op, "bias", {d.channels});
  }
  if (state_in.defined()) {
    expect(state_in, op, "state_in", x.device(), {x.dtype()});
    expect_shape(state_in, op, "state_in", {d.batch, d.channels, d.taps - 1});
  }
  return d;
}

void check_accumulator(const char* op, const char* arg, const Tensor& acc, const Tensor& x, const Shape& shape) {
  expect(acc, op, arg, x.device(), {x.dtype() == DType::F64 ? DType::F64 : DType::F32});
  expect_shape(acc, op, arg, shape);
  PRIMER_CHECK(acc.is_contiguous(), "{}: argument '{}' is {}, expected a contiguous accumulator", op, arg,
               acc.describe());
}

Tensor contiguous_or_null(const Tensor& t) { return t.defined() ? t.contiguous() : Tensor(); }
Shape state_shape(const Conv1dDims& d) { return {d.batch, d.channels, d.taps - 1}; }

template <class T> T* ptr(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
[[maybe_unused]] const void* raw(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

#ifdef PRIMER_WITH_CUDA
void conv1d_backward_cuda(const Conv1dDims& d, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& bias,
                          bool silu, const Tensor& state_in, const Tensor& dstate_out, const Tensor& dx,
                          const Tensor& dw_accum, const Tensor& dbias_accum, const Tensor& dstate_in) {
  const Tensor partials =
      Tensor::empty({int64_t(cuda_ops::causal_conv1d_backward_workspace_floats(d, x.dtype()))}, DType::F32, x.device());
  cuda_ops::causal_conv1d_backward(d, x.dtype(), dy.data_ptr(), x.data_ptr(), w.data_ptr(), raw(bias), silu,
                                   raw(state_in), raw(dstate_out), dx.data_ptr(), dw_accum.data<float>(),
                                   ptr<float>(dbias_accum), dstate_in.defined() ? dstate_in.data_ptr() : nullptr,
                                   partials.data<float>());
}
#endif

// Each head's L2 norm asked of the conv's pass: heads of head_dim channels, eps inside the root, r per row into *rstd.
struct HeadNormAsked {
  int64_t head_dim;
  double eps;
  Tensor* rstd;
};

// The conv's output (and final state). With `norm`, each head is also normalised in the conv's own pass where the
// CUDA kernel can (SiLU, cuda_ops::causal_conv1d_fuses_head_norm); the result says whether it was.
std::pair<Tensor, bool> conv_forward(const char* op, const Conv1dDims& d, const Tensor& x, const Tensor& w,
                                     const Tensor& bias, bool silu, const Tensor& state_in, Tensor* state_out,
                                     [[maybe_unused]] const HeadNormAsked* norm) {
  const Tensor xc = x.contiguous(), wc = w.contiguous(), bc = contiguous_or_null(bias),
               sc = contiguous_or_null(state_in);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor st = state_out ? Tensor::empty(state_shape(d), x.dtype(), x.device()) : Tensor();
  bool normed = false;
  if (x.is_cpu()) {
    dispatch_cpu_float(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      cpu::causal_conv1d<T>(d, xc.data<T>(), wc.data<T>(), ptr<T>(bc), silu, ptr<T>(sc), y.data<T>(), ptr<T>(st));
    });
  } else {
    PRIMER_ON_CUDA([&] {
      cuda_ops::ConvHeadNorm head_norm;
      if (norm && silu &&
          cuda_ops::causal_conv1d_fuses_head_norm(d, x.dtype(), xc.data_ptr(), y.data_ptr(), int(norm->head_dim))) {
        *norm->rstd = Tensor::empty({d.batch * d.time * (d.channels / norm->head_dim)}, DType::F32, x.device());
        head_norm = {int(norm->head_dim), float(norm->eps), norm->rstd->data<float>()};
        normed = true;
      }
      cuda_ops::causal_conv1d(d, x.dtype(), xc.data_ptr(), wc.data_ptr(), raw(bc), silu, raw(sc), y.data_ptr(),
                              st.defined() ? st.data_ptr() : nullptr, head_norm);
    }());
  }
  if (state_out) *state_out = st;
  return {y, normed};
}

}  // namespace

Tensor causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& bias, bool silu, const Tensor& state_in,
                     Tensor* state_out) {
  constexpr const char* op = "causal_conv1d";
  return conv_forward(op, check_inputs(op, x, w, bias, state_in), x, w, bias, silu, state_in, state_out, nullptr).first;
}

Tensor causal_conv1d_l2(const Tensor& x, const Tensor& w, const Tensor& bias, bool silu, const Tensor& state_in,
                        Tensor* state_out, int64_t head_dim, double eps, Tensor* rstd_out) {
  constexpr const char* op = "causal_conv1d_l2";
  const Conv1dDims d = check_inputs(op, x, w, bias, state_in);
  PRIMER_CHECK(head_dim > 0 && d.channels % head_dim == 0 && eps >= 0,
               "{}: head_dim {} must divide x's {} channels and eps ({}) be ≥ 0", op, head_dim, d.channels, eps);
  Tensor rstd;
  const HeadNormAsked norm{head_dim, eps, &rstd};
  const auto [y, normed] = conv_forward(op, d, x, w, bias, silu, state_in, state_out, &norm);
  if (normed) {
    if (rstd_out) *rstd_out = rstd;
    return y;
  }
  const Shape heads{d.batch, d.time, d.channels / head_dim, head_dim};
  return rmsnorm(y.view(heads), Tensor(), Tensor(), NormSpec{eps, NormGate::None, true}, rstd_out).view(x.shape());
}

Tensor causal_conv1d_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu,
                              const Tensor& state_in, const Tensor& dstate_out, const Tensor& dw_accum,
                              const Tensor& dbias_accum, Tensor* dstate_in) {
  constexpr const char* op = "causal_conv1d_backward";
  const Conv1dDims d = check_inputs(op, x, w, bias, state_in);
  expect(dy, op, "dy", x.device(), {x.dtype()});
  expect_shape(dy, op, "dy", x.shape());
  if (dstate_out.defined()) {
    expect(dstate_out, op, "dstate_out", x.device(), {x.dtype()});
    expect_shape(dstate_out, op, "dstate_out", state_shape(d));
  }
  check_accumulator(op, "dw_accum", dw_accum, x, {d.channels, d.taps});
  if (dbias_accum.defined()) check_accumulator(op, "dbias_accum", dbias_accum, x, {d.channels});

  const Tensor dyc = dy.contiguous(), xc = x.contiguous(), wc = w.contiguous(), bc = contiguous_or_null(bias),
               sc = contiguous_or_null(state_in), dsc = contiguous_or_null(dstate_out);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor dst = dstate_in ? Tensor::empty(state_shape(d), x.dtype(), x.device()) : Tensor();
  if (x.is_cpu()) {
    dispatch_cpu_float(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      cpu::causal_conv1d_backward<T>(d, dyc.data<T>(), xc.data<T>(), wc.data<T>(), ptr<T>(bc), silu, ptr<T>(sc),
                                     ptr<T>(dsc), dx.data<T>(), dw_accum.data<T>(), ptr<T>(dbias_accum), ptr<T>(dst));
    });
  } else {
    PRIMER_ON_CUDA(conv1d_backward_cuda(d, dyc, xc, wc, bc, silu, sc, dsc, dx, dw_accum, dbias_accum, dst));
  }
  if (dstate_in) *dstate_in = dst;
  return dx;
}

}  // namespace primer::ops
