#include "core/ops/sigmoid_gate.h"

#include "core/ops/cuda/sigmoid_gate.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise_math.h"
#include "core/ops/reduce.h"

namespace primer::ops {
namespace {

using Dims = cuda_ops::SigmoidGateDims;

// a [..., P] with bias [P] (if given) of a's device; on the CPU bias in a's dtype (its reference computes in a's).
Dims check_layout(const char* op, const Tensor& a, const Tensor& bias) {
  expect_float(a, op, "a", a.device());
  PRIMER_CHECK(a.dim() >= 1, "{}: a is {}, expected [..., P]", op, a.describe());
  const int64_t P = a.size(-1);
  if (bias.defined()) {
    if (a.is_cpu())
      expect(bias, op, "bias", a.device(), {a.dtype()});
    else
      expect_float(bias, op, "bias", a.device());
    expect_shape(bias, op, "bias", {P});
  }
  return {P == 0 ? 0 : a.numel() / P, P};
}

}  // namespace

Tensor sigmoid_gate(const Tensor& a, const Tensor& bias, double offset) {
  constexpr const char* op = "sigmoid_gate";
  const Dims d = check_layout(op, a, bias);
  const Tensor ac = a.contiguous(), bc = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = Tensor::empty(a.shape(), accum_dtype(a.dtype()), a.device());
  if (a.is_cpu()) {
    dispatch_cpu_float(a.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      const T *x = ac.data<T>(), *b = data_or_null<T>(bc);
      T* out = y.data<T>();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < d.rows * d.params; ++i)
        out[i] = T(math::sigmoid(double(x[i]) + (b ? double(b[i % d.params]) : 0.0)) + offset);
    });
  } else {
    PRIMER_ON_CUDA(cuda_ops::sigmoid_gate_forward(y.data<float>(), ac.data_ptr(),
                                                  bc.defined() ? bc.data_ptr() : nullptr, float(offset), d, a.dtype(),
                                                  bc.defined() ? bc.dtype() : a.dtype()));
  }
  return y;
}

SigmoidGateGrads sigmoid_gate_backward(const Tensor& dy, const Tensor& a, const Tensor& bias) {
  constexpr const char* op = "sigmoid_gate_backward";
  const Dims d = check_layout(op, a, bias);
  expect(dy, op, "dy", a.device(), {accum_dtype(a.dtype())});
  expect_shape(dy, op, "dy", a.shape());
  const Tensor ac = a.contiguous(), bc = bias.defined() ? bias.contiguous() : Tensor(), dyc = dy.contiguous();
  SigmoidGateGrads grads;
  grads.da = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (a.is_cpu()) {
    dispatch_cpu_float(a.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      const T *x = ac.data<T>(), *b = data_or_null<T>(bc), *g = dyc.data<T>();
      T* dx = grads.da.data<T>();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < d.rows * d.params; ++i) {
        const double z = double(x[i]) + (b ? double(b[i % d.params]) : 0.0);
        dx[i] = T(double(g[i]) * math::unary_derivative(Unary::Sigmoid, z));
      }
    });
  } else {
    PRIMER_ON_CUDA(cuda_ops::sigmoid_gate_backward(grads.da.data_ptr(), dyc.data<float>(), ac.data_ptr(),
                                                   bc.defined() ? bc.data_ptr() : nullptr, d, a.dtype(),
                                                   bc.defined() ? bc.dtype() : a.dtype()));
  }
  if (bias.defined()) {  // summed in the wider of the two dtypes, then given the bias's
    Tensor rows = grads.da.view({d.rows, d.params});
    if (dtype_size(bias.dtype()) > dtype_size(rows.dtype())) rows = rows.to(bias.dtype());
    const Tensor column_sums = sum(rows, 0);
    grads.dbias = column_sums.dtype() == bias.dtype() ? column_sums : column_sums.to(bias.dtype());
  }
  return grads;
}

}  // namespace primer::ops
